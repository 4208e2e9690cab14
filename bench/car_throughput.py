"""The car join's throughput on one worker: a backlog of car arrivals and zone readings.

Both inputs are in the broker before the worker starts (a replay); the car side turns arrivals
into DEL/ADD moves, the zone side joins moves and readings. Rate = input records ÷ seconds from
the first car-pollution output to the moment every input was consumed and the last output
written (the worker's ``records_in`` on /stats/, polled every 50 ms), so start-up is not
counted. Producers use one-record batches (tansu, see bench.throughput).

``python -m bench.car_throughput [--records N] [--runs R]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from typing import Any

from tests.kafka_io import create_topics, jbytes, produce_bulk
from bench.workers import bench_broker, new_names, time_to_last_output, workdir
from tests.harness import batched

START_MS = 1_790_000_000_000


def workload(records: int, seed: int) -> list[tuple[str, str, dict]]:
    from app.commands.sample_traffic import sample_cars_and_zones

    return sample_cars_and_zones(seed=seed, count=records, start_ms=START_MS, cars=2_000,
                                 zones=50, late_ratio=0.1)


def one_run(records: int, seed: int, partitions: int, batching: bool = False,
            ) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker, partitions=partitions)
        names = batched(names) if batching else names
        data = workload(records, seed)
        topic = {"car": names.car_arrivals_topic, "zone": names.zones_topic}
        asyncio.run(create_topics(broker.bootstrap, list(topic.values()), partitions))
        asyncio.run(produce_bulk(broker.bootstrap,
                                 ((topic[k], key.encode(), jbytes(v)) for k, key, v in data),
                                 partitions))
        t = time_to_last_output(names, folder, list(topic.values()), len(data),
                                [names.car_pollution_topic], broker.bootstrap, name="cars")
    outs, seconds = t["outputs"], t["seconds"]
    return {"records": len(data), "seconds": seconds, "rate": len(data) / seconds,
            "outputs": len(outs)}


def run(records: int = 10_000, runs: int = 3, seed: int = 1, partitions: int = 4,
        batched_records: int = 100_000) -> dict[str, Any]:
    """Median over ``runs`` runs, each on a fresh broker: one-record producer batches
    (``records``), then the producer's default batching (``batched_records``: a backlog long
    enough to time tens of thousands of records a second)."""
    results = [one_run(records, seed + i, partitions) for i in range(runs)]
    batched_runs = ([one_run(batched_records, seed + 100 + i, partitions, batching=True)
                     for i in range(runs)] if batched_records else [])
    return {"name": "car_throughput", "records": records, "runs": runs,
            "partitions": partitions, "batched_records": batched_records,
            "car_throughput_rps": round(statistics.median(r["rate"] for r in results)),
            "car_throughput_batched_rps": (round(statistics.median(r["rate"] for r in batched_runs))
                                   if batched_runs else None),
            "each_run": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                         for r in results + batched_runs]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batched-records", type=int, default=100_000)
    a = p.parse_args(argv)
    print(json.dumps(run(a.records, a.runs, batched_records=a.batched_records), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

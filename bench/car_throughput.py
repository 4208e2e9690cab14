"""The car join's throughput on one worker: a backlog of car arrivals and zone readings.

Both inputs are in the broker before the worker starts (a replay); the car side turns arrivals
into DEL/ADD moves, the zone side joins moves and readings. Rate = input records ÷ seconds from
the first car-pollution output to the moment every input was consumed and the last output
written (the worker's ``records_in`` on /stats/, polled every 50 ms), so start-up is not
counted. Producers use one-record batches (tansu, see bench.throughput).

``python -m bench.car_throughput [--records N] [--runs R]``
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.harness import Bench, Figure, each_run, medians
from bench.workers import bench_broker, new_names, time_to_last_output, workdir
from tests.harness import batched
from tests.kafka_io import create_topics, jbytes, produce_bulk

RPS = Figure("car_throughput_rps", unit="records/s", note="one-record batches")
BATCHED_RPS = Figure(
    "car_throughput_batched_rps", goal=25_000, unit="records/s", note="default batching"
)
START_MS = 1_790_000_000_000


def workload(records: int, seed: int) -> list[tuple[str, str, dict]]:
    from app.commands.sample_traffic import sample_cars_and_zones

    return sample_cars_and_zones(
        seed=seed, count=records, start_ms=START_MS, cars=2_000, zones=50, late_ratio=0.1
    )


def one_run(
    records: int,
    seed: int,
    partitions: int,
    batching: bool = False,
) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker, partitions=partitions)
        names = batched(names) if batching else names
        data = workload(records, seed)
        topic = {"car": names.car_arrivals_topic, "zone": names.zones_topic}
        asyncio.run(create_topics(broker.bootstrap, list(topic.values()), partitions))
        asyncio.run(
            produce_bulk(
                broker.bootstrap,
                ((topic[k], key.encode(), jbytes(v)) for k, key, v in data),
                partitions,
            )
        )
        t = time_to_last_output(
            names,
            folder,
            list(topic.values()),
            len(data),
            [names.car_pollution_topic],
            broker.bootstrap,
            name="cars",
        )
    outs, seconds = t["outputs"], t["seconds"]
    return {
        "records": len(data),
        "seconds": seconds,
        "rate": len(data) / seconds,
        "outputs": len(outs),
    }


def run(
    records: int = 10_000,
    runs: int = 3,
    seed: int = 1,
    partitions: int = 4,
    batched_records: int = 100_000,
) -> dict[str, Any]:
    """Median over ``runs`` runs, each on a fresh broker: one-record producer batches
    (``records``), then the producer's default batching (``batched_records``: a backlog long
    enough to time tens of thousands of records a second)."""
    results = [one_run(records, seed + i, partitions) for i in range(runs)]
    batched_runs = (
        [one_run(batched_records, seed + 100 + i, partitions, batching=True) for i in range(runs)]
        if batched_records
        else []
    )
    return {
        "name": "car_throughput",
        "records": records,
        "runs": runs,
        "partitions": partitions,
        "batched_records": batched_records,
        "car_throughput_rps": round(medians(results)["rate"]),
        "car_throughput_batched_rps": (
            round(medians(batched_runs)["rate"]) if batched_runs else None
        ),
        "each_run": each_run(results + batched_runs),
    }


BENCH = Bench(
    "car_throughput",
    run,
    (RPS, BATCHED_RPS),
    # the median of 2 (single runs ranged within ~15 %); the batched rates are goals
    suite=lambda quick, runs: {
        "records": 3_000 if quick else 10_000,
        "runs": min(runs, 2),
        "batched_records": 20_000 if quick else 100_000,
    },
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

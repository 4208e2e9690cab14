"""The repartition hop's cost (issue 46 item 3): the movies join as a spec of one's own, run
on one worker over the same backlog twice: ratings keyed by their movie id (the join reads them
as they are), then keyed by their user id with ``"repartition": true`` on the events side
(every rating passed through ``<app id>-<join>-events-repartition`` first).

Both inputs are in the broker before the worker starts (a replay, as in
``bench.movies_throughput``, whose workload this is). Rate = input records ÷ seconds from the
first record handed to the join (or its first output) to every input consumed by the join
and the last revision written (``bench.workers.time_to_last_output``; with the hop, the join's
events input is the repartition topic, so the hop's time is inside it). Default producer
batching (a worker on a real Kafka).

- ``repartition_rps``: the rate with the hop;
- ``repartition_cost_ratio``: it ÷ the rate without (1.0: the hop costs nothing).

``python -m bench.repartition [--records N] [--runs R]``
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from app.joins.catalog import movie_spec
from app.joins.sides import repartition_topic
from app.settings import Settings
from bench.harness import Bench, Figure, each_run, medians
from bench.movies_throughput import workload
from bench.workers import bench_broker, new_names, time_to_last_output, workdir
from tests.harness import batched
from tests.kafka_io import create_topics, jbytes, produce_bulk

RPS = Figure("repartition_rps", unit="records/s", note="default batching, with the hop")
RATIO = Figure(
    "repartition_cost_ratio", unit="×", note="rate with the hop ÷ without (same records)"
)


def spec(names: Any, repartition: bool) -> dict[str, Any]:
    """The movies spec on this run's topics, named ``rekeyed``."""
    s = movie_spec(
        Settings.model_construct(
            ratings_topic=names.ratings_topic,
            movies_topic=names.movies_topic,
            rated_movies_topic=names.rated_movies_topic,
            movie_ticks_topic=names.movie_ticks_topic,
        )
    )
    s["name"] = "rekeyed"
    s.pop("tables", None)
    if repartition:
        s["events"] = {**s["events"], "repartition": True}
    return s


def one_run(records: int, seed: int, partitions: int, repartition: bool) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        names = batched(new_names(broker, partitions=partitions))
        raw = spec(names, repartition)
        joins = Path(folder) / "joins.json"
        joins.write_text(json.dumps([raw]))
        data = workload(records, seed)
        topic = {"movie": names.movies_topic, "rating": names.ratings_topic}
        asyncio.run(create_topics(broker.bootstrap, list(topic.values()), partitions))

        def key(kind: str, k: str, v: dict[str, Any]) -> bytes:
            # keyed otherwise with the hop: the user id, never the join key
            return (v["user_id"] if repartition and kind == "rating" else k).encode()

        asyncio.run(
            produce_bulk(
                broker.bootstrap,
                ((topic[k], key(k, mk, v), jbytes(v)) for k, mk, v in data),
                partitions,
            )
        )
        events = (
            repartition_topic(names.app_id, "rekeyed", "events")
            if repartition
            else names.ratings_topic
        )
        t = time_to_last_output(
            names,
            folder,
            [events, names.movies_topic],
            len(data),
            [names.rated_movies_topic],
            broker.bootstrap,
            name="rekeyed" if repartition else "plain",
            joins_file=joins,
        )
    return {
        "records": len(data),
        "seconds": t["seconds"],
        "rate": len(data) / t["seconds"],
        "outputs": len(t["outputs"]),
        "repartition": repartition,
    }


def run(
    records: int = 100_000, runs: int = 3, seed: int = 1, partitions: int = 4
) -> dict[str, Any]:
    """Median over ``runs`` runs of each, on a fresh broker each, alternating (plain, hop) so
    that a busier moment of the machine falls on both."""
    plain, hop = [], []
    for i in range(runs):
        plain.append(one_run(records, seed + i, partitions, repartition=False))
        hop.append(one_run(records, seed + i, partitions, repartition=True))
    with_hop, without = medians(hop)["rate"], medians(plain)["rate"]
    return {
        "name": "repartition",
        "records": records,
        "runs": runs,
        "partitions": partitions,
        "repartition_rps": round(with_hop),
        "repartition_cost_ratio": round(with_hop / without, 3),
        "plain_rps": round(without),
        "each_run": each_run(plain + hop),
    }


def report(m: dict[str, Any]) -> str:
    return (
        f"repartition hop ({m['records']:,} records): {m['repartition_rps']}/s with it, "
        f"{m['plain_rps']}/s without (ratio {m['repartition_cost_ratio']})"
    )


BENCH = Bench(
    "repartition",
    run,
    (RPS, RATIO),
    report=report,
    suite=lambda quick, runs: {"records": 5_000 if quick else 100_000, "runs": min(runs, 2)},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

"""The PostgreSQL sink's rate: a join's revision log landed in a table by one sink.

A backlog of revisions (ids with 1-3 revisions each, a third of them repeated after a newer
one, as a worker's re-emits after a crash make) is in the broker before the sink starts; one
sink (:class:`app.downstream.postgres_sink.PostgresSink`, in this process) reads it with its
consumer group, one transaction per poll, offsets after each commit. Rate = records ÷ seconds
from the first committed batch to the last, so the group join and connection are not counted.
The table is then checked against the oracle (the highest revision per id): a fast sink that is
wrong is no figure.

The goal is one worker's output: ``throughput_batched_rps``'s goal (45,000 inputs/s) makes
~34,000 revisions/s on the mood join (about three of four inputs are events, plus corrections).

``python -m bench.sink_postgres [--records N] [--runs R]``
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from bench.harness import Bench, Figure, each_run, medians
from bench.workers import bench_broker, new_names
from tests.kafka_io import create_topics, jbytes, produce_bulk
from tests.postgres_server import PostgresServer

RPS = Figure(
    "sink_postgres_rps",
    goal=30_000,
    unit="revisions/s",
    note="one sink, one PostgreSQL, batches of 2000",
)


def revision_log(records: int, seed: int) -> list[tuple[bytes, dict]]:
    """``records`` (key, revision) records in log order (module doc)."""
    rng = random.Random(seed)
    out: list[tuple[bytes, dict]] = []
    i = 0
    while len(out) < records:
        jid = f"rec-{seed}-{i}"
        top = rng.randint(1, 3)
        for n in [*range(1, top + 1), *([rng.randint(1, top)] if rng.random() < 0.3 else [])]:
            out.append(
                (
                    jid.encode(),
                    {
                        "id": jid,
                        "consultant": f"c{i % 500}",
                        "recommendation": "bike",
                        "event_time": 1_790_000_000_000 + i,
                        "mood": f"m{n}",
                        "mood_event_time": 1_790_000_000_000,
                        "revision": n,
                        "previous_mood": None if n == 1 else f"m{n - 1}",
                        "cause": "arrival",
                    },
                )
            )
        i += 1
    return out[:records]


def oracle_of(log: list[tuple[bytes, dict]]) -> dict[str, int]:
    """The consumer rule's answer: the highest revision per id."""
    best: dict[str, int] = {}
    for _, r in log:
        best[r["id"]] = max(best.get(r["id"], 0), r["revision"])
    return best


async def land(
    bootstrap: str, topic: str, dsn: str, records: int, max_records: int
) -> dict[str, Any]:
    """Run one sink until it has read ``records``; (seconds from its first batch, counts)."""
    from app.downstream.postgres_sink import PostgresSink

    sink = PostgresSink(
        bootstrap, topic, dsn, "etj_bench", "etj-bench-sink", max_records=max_records
    )
    task = asyncio.ensure_future(sink.run())
    first = None
    deadline = time.monotonic() + 600
    while sink.counts.records < records and time.monotonic() < deadline:
        if task.done():
            task.result()  # its error, if it failed
        if first is None and sink.counts.batches:
            first = (time.monotonic(), sink.counts.records)
        await asyncio.sleep(0.005)
    end = time.monotonic()
    sink.stop.set()
    counts = await task
    if first is None or counts.records < records:
        raise RuntimeError(f"the sink read {counts.records} of {records} records")
    return {
        "seconds": end - first[0],
        "timed_records": records - first[1],
        "batches": counts.batches,
        "upserts": counts.upserts,
        "retries": counts.retries,
    }


def one_run(records: int, seed: int, partitions: int, max_records: int) -> dict[str, Any]:
    import psycopg

    log = revision_log(records, seed)
    oracle = oracle_of(log)
    server = PostgresServer().start()
    try:
        with bench_broker() as broker:
            names = new_names(broker)
            topic = names.output_topic
            asyncio.run(create_topics(broker.bootstrap, [topic], partitions))
            asyncio.run(
                produce_bulk(broker.bootstrap, ((topic, k, jbytes(v)) for k, v in log), partitions)
            )
            t = asyncio.run(land(broker.bootstrap, topic, server.dsn, len(log), max_records))
        with psycopg.connect(server.dsn) as conn:
            table = dict(conn.execute("SELECT id, revision FROM etj_bench").fetchall())
    finally:
        server.stop()
    if table != oracle:
        wrong = sum(table.get(k) != v for k, v in oracle.items())
        raise AssertionError(f"the table differs from the oracle on {wrong} ids")
    return {"records": len(log), "ids": len(oracle), **t, "rate": t["timed_records"] / t["seconds"]}


def run(
    records: int = 200_000,
    runs: int = 3,
    seed: int = 1,
    partitions: int = 4,
    max_records: int = 2000,
) -> dict[str, Any]:
    """Median over ``runs`` runs, each on a fresh broker and a fresh PostgreSQL."""
    results = [one_run(records, seed + i, partitions, max_records) for i in range(runs)]
    return {
        "name": "sink_postgres",
        "records": records,
        "runs": runs,
        "partitions": partitions,
        "max_records": max_records,
        "sink_postgres_rps": round(medians(results)["rate"]),
        "each_run": each_run(results),
    }


BENCH = Bench(
    "sink_postgres",
    run,
    (RPS,),
    suite=lambda quick, runs: {"records": 20_000 if quick else 200_000, "runs": min(runs, 2)},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

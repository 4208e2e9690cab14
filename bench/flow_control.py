"""Flow control across co-partitioned inputs: corrections from a backlog vs the same records live.

One out-of-order scenario (``sample-traffic``'s generator: moods and recommendations, jittered
arrivals, some moods very late), two ways:
- **live**: records are sent one at a time in arrival order, each once the worker has consumed
  the one before (its ``records_in``), so the worker sees exactly the arrival order;
- **backlog**: every record is in the broker before the worker starts (a replay, a backfill, a
  restart after downtime); the worker picks its own order — with flow control
  (:mod:`app.inputs.flow_control`, the default) and without (``ETJ_FLOW_CONTROL=false``).
The scenario spans far more event time than the retention, so order matters twice: a late
dimension costs a correction, and an input drained ahead of the other pushes stream time on until
the other's records are *late* (dropped to the late topic). Printed with two references computed
by the pure join rules (no broker): corrections and late records of the arrival order (what
*live* must equal) and of a per-partition merge that always takes the input whose next record
has the smaller event time (Kafka Streams' timestamp synchronisation: what a backlog gets with
flow control).

``python -m bench.flow_control [--records N]``
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaProducer

from bench.harness import Bench, Figure
from bench.workers import bench_broker, new_names, records_in, start_worker, wait_stats, workdir
from tests.kafka_io import create_topics, jbytes, partition_of, produce_bulk, read_topics
from tests.oracle import Mood, Recommendation
from tests.replay import MoodReplay

START_MS = 1_790_000_000_000
PARTITIONS = 4
#: the live run's worker waits at most 10 ms on an empty fetch (the bench's usual 100 ms, which
#: tansu holds in full, made the live run ~50 ms a record, 32 s for 600). Each record is sent
#: only once the one before was consumed, so the wait sets the run's pace, not its figures.
LIVE_PACE = {"consumer_fetch_max_wait_ms": 10}
Record = tuple[str, str, dict]


def scenario(records: int, seed: int) -> list[Record]:
    from app.commands.sample_traffic import sample_moods_and_events

    return sample_moods_and_events(seed=seed, count=records, start_ms=START_MS, late_ratio=0.3)


def simulate(
    ordered: list[Record], retention_ms: int, partitions: int = PARTITIONS
) -> dict[str, int]:
    """Corrections and late records the join rules give when records come in this order
    (stream time per partition, records older than it minus the retention are late)."""
    replay = MoodReplay()  # the engine's own rules and layout
    clocks: dict[int, int] = {}
    corrections = late = 0
    for kind, key, v in ordered:
        p = partition_of(key.encode(), partitions)
        clock = clocks.get(p)
        if clock is not None and v["event_time"] < clock - retention_ms:
            late += 1
            continue
        clocks[p] = max(clock or 0, v["event_time"])
        if kind == "mood":
            revs = replay.mood(Mood(v["name"], v["mood"], v["event_time"]))
        else:
            revs = replay.recommendation(
                Recommendation(v["consultant"], v["recommendation"], v["event_time"], v.get("id"))
            )
        corrections += sum(1 for r in revs if r["revision"] > 1)
    return {"corrections": corrections, "late": late}


def event_time_merge(records: list[Record], partitions: int = PARTITIONS) -> list[Record]:
    """Per partition, always the input head with the smaller event time (moods first on ties)."""
    queues: dict[tuple[int, str], list[Record]] = {}
    for r in records:  # each input partition keeps its arrival (offset) order
        queues.setdefault((partition_of(r[1].encode(), partitions), r[0]), []).append(r)
    out: list[Record] = []
    for p in range(partitions):
        moods, events = queues.get((p, "mood"), []), queues.get((p, "event"), [])
        i = j = 0
        while i < len(moods) or j < len(events):
            take_mood = j >= len(events) or (
                i < len(moods) and moods[i][2]["event_time"] <= events[j][2]["event_time"]
            )
            if take_mood:
                out.append(moods[i])
                i += 1
            else:
                out.append(events[j])
                j += 1
    return out


async def send_one_by_one(bootstrap: str, names: Any, w: Any, records: list[Record]) -> None:
    topic = {"mood": names.moods_topic, "event": names.events_topic}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        for n, (kind, key, value) in enumerate(records, 1):
            await producer.send_and_wait(topic[kind], jbytes(value), key=key.encode())
            deadline = time.monotonic() + 60
            while records_in(w) < n:  # the worker consumed it: the next may go
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker stuck before record {n}")
                await asyncio.sleep(0.002)
    finally:
        await producer.stop()


def count_output(broker: Any, names: Any) -> dict[str, int]:
    outs = asyncio.run(
        read_topics(
            broker.bootstrap,
            [names.output_topic],
            until=lambda got: False,
            timeout_s=60,
            idle_s=1.5,
        )
    )
    revs = [o.json() for o in outs]
    return {"revisions": len(revs), "corrections": sum(1 for r in revs if r["revision"] > 1)}


def run_worker(
    records: list[Record], live: bool, retention_ms: int, flow_control: bool = True
) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        names = new_names(
            broker,
            retention_ms=retention_ms,
            flow_control=str(flow_control).lower(),
            **(LIVE_PACE if live else {}),
        )
        topic = {"mood": names.moods_topic, "event": names.events_topic}
        asyncio.run(create_topics(broker.bootstrap, list(topic.values()), PARTITIONS))
        if not live:
            asyncio.run(
                produce_bulk(
                    broker.bootstrap,
                    ((topic[k], key.encode(), jbytes(v)) for k, key, v in records),
                    PARTITIONS,
                )
            )
        w = start_worker(names, folder, name="live" if live else "backlog")
        try:
            w.wait_ready(timeout_s=120)
            t0 = time.monotonic()
            if live:
                asyncio.run(send_one_by_one(broker.bootstrap, names, w, records))
            _, s = wait_stats(
                w,
                lambda s: sum(s["records_in"].values()) >= len(records),
                timeout_s=300,
                every_s=0.1,
            )
            seconds = time.monotonic() - t0
            out = count_output(broker, names)
        finally:
            w.kill()  # the figures are read; nothing reuses this broker
    out["late"] = int(sum((s.get("late") or {}).values()))
    out["seconds"] = round(seconds, 1)
    return out


def run(records: int = 1_000, seed: int = 7, retention_ms: int = 120_000) -> dict[str, Any]:
    """The scenario spans ``records`` seconds of event time, far more than the retention: a
    topic drained ahead of the other pushes stream time on, and the other's records turn late."""
    data = scenario(records, seed)
    live = run_worker(data, live=True, retention_ms=retention_ms)
    backlog = run_worker(data, live=False, retention_ms=retention_ms)
    unordered = run_worker(data, live=False, retention_ms=retention_ms, flow_control=False)
    arrival = simulate(data, retention_ms)
    merged = simulate(event_time_merge(data), retention_ms)
    return {
        "name": "flow_control",
        "records": records,
        "retention_s": retention_ms / 1000,
        "corrections_live": live["corrections"],
        "late_live": live["late"],
        "corrections_backlog": backlog["corrections"],
        "late_backlog": backlog["late"],
        "corrections_backlog_without_flow_control": unordered["corrections"],
        "late_backlog_without_flow_control": unordered["late"],
        "expected_live": arrival,
        "expected_event_time_merge": merged,
        "live": live,
        "backlog": backlog,
        "backlog_without_flow_control": unordered,
    }


#: corrections and late records, the same records three ways (no goals: the references are
#: in the result, ``expected_*``)
FIGURES = (
    Figure("corrections_live", note="records sent one by one, in arrival order"),
    Figure("corrections_backlog", note="a backlog, with flow control"),
    Figure("late_live"),
    Figure("late_backlog"),
    Figure("corrections_backlog_without_flow_control"),
    Figure("late_backlog_without_flow_control"),
)


def report(f: dict[str, Any]) -> str:
    return (
        f"flow control ({f['records']} records, retention {f['retention_s']:g} s): live "
        f"{f['corrections_live']} corrections / {f['late_live']} late (rules in arrival "
        f"order: {f['expected_live']}); backlog {f['corrections_backlog']} / "
        f"{f['late_backlog']} (event-time merge: {f['expected_event_time_merge']}); backlog "
        f"without flow control {f.get('corrections_backlog_without_flow_control')} / "
        f"{f.get('late_backlog_without_flow_control')}"
    )


BENCH = Bench(
    "flow_control",
    run,
    FIGURES,
    report=report,
    suite=lambda quick, runs: {"records": 300 if quick else 600, "retention_ms": 60_000},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

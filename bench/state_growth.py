"""State growth: state size after 10× more events at the same event-time retention ÷ after 1×.

One worker, one stream of out-of-order moods and recommendations (100 consultants, 10 records
per second of event time). The first tenth spans twice the retention; the figure compares the
state after it with the state after all ten tenths. State is measured the way a restarted worker
would see it: every changelog topic of the app, compacted (the newest value per key, deleted keys
dropped), summed in bytes (key + value) — after the revisit ticks have purged what fell behind
the horizon. Bounded state means a ratio near 1, whatever the history.

``python -m bench.state_growth [--records N] [--retention-ms MS]``
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench.harness import Bench, Figure
from bench.workers import bench_broker, new_names, start_worker, wait_stats, workdir
from tests.kafka_io import create_topics, jbytes, produce_bulk, read_topics

RATIO = Figure(
    "state_growth_ratio",
    "ratio",
    1.2,
    "<=",
    note="state bytes after 10x the events ÷ after 1x, same retention",
)
START_MS = 1_790_000_000_000


async def changelog_topics(bootstrap: str, app_id: str) -> list[str]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        return sorted(
            t
            for t in await consumer.topics()
            if t.startswith(app_id + "-") and t.endswith("-changelog")
        )
    finally:
        await consumer.stop()


def compacted_size(bootstrap: str, app_id: str) -> dict[str, Any]:
    """Live keys and bytes per table, as compaction (or a recovery) would leave them."""
    topics = asyncio.run(changelog_topics(bootstrap, app_id))
    records = asyncio.run(
        read_topics(bootstrap, topics, until=lambda got: False, timeout_s=120, idle_s=1.5)
    )
    latest: dict[tuple[str, bytes | None], bytes | None] = {}
    for r in records:  # read in offset order per partition; a key lives in one partition
        latest[(r.topic, r.key)] = r.value
    tables: dict[str, dict[str, int]] = {}
    for (topic, key), value in latest.items():
        if value is None:
            continue
        t = tables.setdefault(topic[len(app_id) + 1 : -len("-changelog")], {"keys": 0, "bytes": 0})
        t["keys"] += 1
        t["bytes"] += len(key or b"") + len(value)
    return {
        "bytes": sum(t["bytes"] for t in tables.values()),
        "keys": sum(t["keys"] for t in tables.values()),
        "changelog_records": len(records),
        "tables": tables,
    }


def workload(records: int, consultants: int, seed: int) -> list[tuple[str, str, dict]]:
    from app.commands.sample_traffic import sample_moods_and_events

    names = tuple(f"c{i:03d}" for i in range(consultants))
    return sample_moods_and_events(
        seed=seed,
        count=records,
        start_ms=START_MS,
        step_ms=100,
        late_ratio=0.1,
        late_delay_ms=5_000,
        consultants=names,
    )


def feed_live(
    bootstrap: str,
    w: Any,
    topic: dict[str, str],
    data: list[Any],
    lo: int,
    hi: int,
    chunk: int = 200,
) -> dict[str, Any]:
    """Send ``data[lo:hi]`` as it would arrive live: a chunk (20 s of event time, less than the
    retention) at a time, the next once the worker consumed it. A backlog sent at once would be
    drained one topic before the other, and the other topic's records would be *late* (see
    bench.flow_control) — a different benchmark."""
    s: dict[str, Any] = {}
    for start in range(lo, hi, chunk):
        end = min(hi, start + chunk)
        asyncio.run(
            produce_bulk(
                bootstrap, ((topic[k], key.encode(), jbytes(v)) for k, key, v in data[start:end]), 4
            )
        )
        _, s = wait_stats(
            w, lambda s, end=end: sum(s["records_in"].values()) >= end, timeout_s=300, every_s=0.05
        )
    return s


def run(
    records: int = 1_000,
    retention_ms: int = 50_000,
    consultants: int = 100,
    seed: int = 3,
    settle_s: float = 3.0,
) -> dict[str, Any]:
    """State after ``records`` and after ``10 * records`` (same stream, same worker)."""
    data = workload(10 * records, consultants, seed)
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker, retention_ms=retention_ms, review_lag_ms=retention_ms // 5)
        topic = {"mood": names.moods_topic, "event": names.events_topic}
        asyncio.run(create_topics(broker.bootstrap, list(topic.values()), 4))
        w = start_worker(names, folder, name="growth")
        sizes = []
        try:
            w.wait_ready(timeout_s=120)
            for lo, hi in [(0, records), (records, 10 * records)]:
                s = feed_live(broker.bootstrap, w, topic, data, lo, hi)
                time.sleep(settle_s)  # revisit ticks (1 s) purge behind the horizon
                size = compacted_size(broker.bootstrap, names.env["ETJ_APP_ID"])
                size["events"] = hi
                size["worker_table_keys"] = s.get("tables", {})
                size["late"] = int(sum((s.get("late") or {}).values()))
                size["dead_letters"] = int(sum((s.get("dead_letters") or {}).values()))
                sizes.append(size)
        finally:
            w.kill()  # the sizes are read; nothing reuses this broker
    first, last = sizes
    span_ms = records * 100
    ratio = last["bytes"] / first["bytes"]
    return {
        "name": "state_growth",
        "events_1x": records,
        "events_10x": 10 * records,
        "event_time_span_1x_s": span_ms / 1000,
        "retention_s": retention_ms / 1000,
        "consultants": consultants,
        "state_bytes_1x": first["bytes"],
        "state_bytes_10x": last["bytes"],
        "state_keys_1x": first["keys"],
        "state_keys_10x": last["keys"],
        "changelog_records_10x": last["changelog_records"],
        "late_records_10x": last["late"],
        "dead_letters_10x": last["dead_letters"],
        "tables_1x": first["tables"],
        "tables_10x": last["tables"],
        "ratio": round(ratio, 3),
        "goal": RATIO.goal,
        "goal_met": RATIO.met(ratio),
    }


BENCH = Bench(
    "state_growth", run, (RATIO,), suite=lambda quick, runs: {"records": 500 if quick else 1_000}
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

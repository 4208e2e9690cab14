"""Recovery: seconds until a restarted worker serves again with a 1,000,000-key table.

The mood history table's changelog (``<app id>-mood-history-changelog``) is filled with one record
per consultant — 1,000,000 keys, each in the partition its consultant's inputs go to, the last
record of every partition alone in its batch so tansu reports the end offset exactly
(docs/contributing/tests.md). Then a worker with an empty data directory starts (a new pod, a lost
disk: the whole changelog is replayed) and the clock runs from process start until ``/ready/``
answers 200 (all tables recovered, the worker consumes). Three restarts on the same changelog
(``make bench``: two); the median is the figure. ``startup_s`` (the same with nothing to
recover: group join, topic checks) is printed beside it, and every restart checks the table
really has 1,000,000 keys (``/stats/``).

The same changelog is then recovered by RocksDB workers (``ETJ_STORE_URL=rocksdb://``): a
first start into an empty data directory, then restarts that keep it, as a StatefulSet pod with
its volume does — Faust then reads only the changelog written since its stored offsets.

``python -m bench.recovery [--keys N] [--runs R] [--rocksdb-restarts R]``
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from typing import Any

from bench.harness import Bench, Figure
from bench.workers import DEFAULT_SESSION, bench_broker, new_names, start_worker, stats, workdir
from tests.kafka_io import Out, create_topics, jbytes, partitions_of, produce_bulk

SECONDS = Figure(
    "recovery_s_1m_keys",
    "seconds",
    15,
    "<=",
    unit="s",
    note="a fresh worker replays the mood history's changelog, memory store",
)
KEYS_PER_S = Figure(
    "recovery_keys_per_s", "keys_per_s", unit="keys/s", note="keys ÷ (seconds to ready − start-up)"
)
TABLE = "mood-history"
MOODS = ("happy", "sad", "tired", "excited", "bored", "focused")


def changelog_records(
    topic: str, keys: int, partitions: int, chunk: int = 100_000
) -> Iterator[Out]:
    """consultant -> [[event_time, mood]] (the table's layout), JSON key and value, in the
    partition of the consultant's own records (partitions computed a chunk at a time)."""
    base = 1_790_000_000_000
    for lo in range(0, keys, chunk):
        names = [f"c{i:07d}" for i in range(lo, min(keys, lo + chunk))]
        for i, name, p in zip(
            range(lo, keys), names, partitions_of([n.encode() for n in names], partitions)
        ):
            yield (topic, jbytes(name), jbytes([[base + i, MOODS[i % len(MOODS)]]]), p)


def time_to_ready(
    names: Any, folder: Any, name: str, store: str, timeout_s: float = 600
) -> tuple[float, dict[str, Any]]:
    """(seconds from process start to /ready/ 200, the worker's /stats/)."""
    t0 = time.monotonic()
    w = start_worker(names, folder, name=name, store_url=store)
    try:
        w.wait_http_ready(timeout_s=timeout_s)
        seconds = time.monotonic() - t0
        return seconds, stats(w)
    finally:
        w.stop()


def run(
    keys: int = 1_000_000, runs: int = 3, rocksdb_restarts: int = 2, partitions: int = 4
) -> dict[str, Any]:
    """Full replays (memory store, new process each), then RocksDB: a first start that
    replays into a fresh data directory and restarts that keep it (a StatefulSet pod with its
    volume reads only what the changelog got since)."""
    with bench_broker() as broker, workdir() as folder:
        # start-up is part of the figure: the worker's own session timeout (group join)
        startup_s, _ = time_to_ready(
            new_names(broker, **DEFAULT_SESSION), folder, "empty", "memory://"
        )
        names = new_names(broker, **DEFAULT_SESSION)
        topic = f"{names.env['ETJ_APP_ID']}-{TABLE}-changelog"
        asyncio.run(create_topics(broker.bootstrap, [topic], partitions))
        t0 = time.monotonic()
        asyncio.run(
            produce_bulk(
                broker.bootstrap,
                changelog_records(topic, keys, partitions),
                partitions,
                exact_end=True,
            )
        )
        load_s = time.monotonic() - t0
        replays, counts = [], []
        for i in range(runs):
            seconds, s = time_to_ready(names, folder, f"replay{i}", "memory://")
            replays.append(seconds)
            counts.append((s.get("tables") or {}).get(TABLE))
        rocks_first, rocks = None, []
        if rocksdb_restarts:  # a first start into an empty RocksDB (a full replay), then restarts
            rocks_first, _ = time_to_ready(names, folder, "rocks", "rocksdb://")
            rocks = [
                time_to_ready(names, folder, "rocks", "rocksdb://")[0]
                for _ in range(rocksdb_restarts)
            ]
    recovered_all = all(c is not None and c >= keys for c in counts)
    med = statistics.median(replays)
    return {
        "name": "recovery",
        "keys": keys,
        "runs": runs,
        "seconds": round(med, 2),
        "startup_s": round(startup_s, 2),
        "seconds_minus_startup": round(med - startup_s, 2),
        "keys_per_s": round(keys / max(med - startup_s, 1e-9)),
        "each_run_s": [round(t, 2) for t in replays],
        "keys_after_recovery": counts,
        "recovered_all_keys": recovered_all,
        "rocksdb_first_start_s": None if rocks_first is None else round(rocks_first, 2),
        "rocksdb_restart_s": round(statistics.median(rocks), 2) if rocks else None,
        "changelog_load_s": round(load_s, 1),
        "goal_s": SECONDS.goal,
        "goal_met": recovered_all and SECONDS.met(med),
    }


def report(rec: dict[str, Any]) -> str:
    return (
        f"recovery: {rec['keys']:,} keys, {rec['seconds']} s to ready ({rec['startup_s']} s "
        f"of it a start with nothing to recover), {rec['keys_per_s']:,} keys/s"
        + (
            f"; RocksDB restart keeping its volume {rec['rocksdb_restart_s']} s"
            if rec.get("rocksdb_restart_s")
            else ""
        )
    )


BENCH = Bench(
    "recovery",
    run,
    (SECONDS, KEYS_PER_S),
    report=report,
    # 1M keys replay in ~20 s each (+ ~2 s to load them): the median of two runs (three runs
    # of 2026-11-25 spread 27.01-27.31 s)
    suite=lambda quick, runs: {
        "keys": 100_000 if quick else 1_000_000,
        "runs": 1 if quick else min(runs, 2),
        "rocksdb_restarts": 1 if quick else 0,
    },
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

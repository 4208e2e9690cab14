"""Snapshot restore: seconds until a worker with an empty disk serves, from a snapshot vs a full
replay of the changelog, with a 5,000,000-key table.

The mood history table's changelog (``<app id>-mood-history-changelog``) is filled with one
record per consultant, as :mod:`bench.recovery` does: written directly with batching producers
(the bench *data load* only; the worker's own writes stay one-record batches), the last record
of every partition alone in its batch so tansu reports the end offset exactly — checked below:
the full replay must end with every key in the table. Then, in the same run, on RocksDB
(``ETJ_STORE_URL=rocksdb://``):

1. a worker with an empty data directory and ``ETJ_SNAPSHOT_URL`` (``file://`` in the run's
   folder) starts: a full replay; the clock runs from process start to ``/ready/`` 200
   (``full_replay_ready_s_5m_keys``). It then snapshots every partition (the timer), and the
   run waits until each partition's snapshot covers its whole changelog, and stops the worker;
2. a second worker, another empty data directory, the same snapshot URL: it installs the
   snapshots and replays nothing after them (``snapshot_ready_s_5m_keys``).

``snapshot_speedup`` is their ratio; ``startup_s`` (a worker with nothing to recover: group
join, topic checks) is the floor under both. Key counts come from ``/stats/`` (RocksDB's own
estimate for a RocksDB table; the restored worker's must match the replayed one's within 1 %).
The store is a local folder: an object store adds its download time (size / bandwidth).

``python -m bench.snapshot_restore [--keys N]``
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

from app.state.snapshot_store import Snapshots
from bench.harness import Bench, Figure
from bench.recovery import TABLE, changelog_records
from bench.workers import DEFAULT_SESSION, bench_broker, new_names, start_worker, stats, workdir
from tests.harness import Names
from tests.kafka_io import create_topics, produce_bulk

READY = Figure(
    "snapshot_ready_s_5m_keys",
    goal=30,
    direction="<=",
    unit="s",
    note="an empty disk made ready from snapshots, 5M keys, RocksDB",
)
REPLAY = Figure(
    "full_replay_ready_s_5m_keys", unit="s", note="the same from a full replay of the changelog"
)
SPEEDUP = Figure("snapshot_speedup", goal=10, note="the replay's seconds ÷ the snapshots'")


def ready_in(
    names: Names, folder: Path, name: str, timeout_s: float = 3600, keep: bool = False, **env: Any
) -> tuple[float, dict[str, Any], Any]:
    """(seconds from process start to /ready/ 200, /stats/, the worker if ``keep``)."""
    t0 = time.monotonic()
    w = start_worker(names, folder, name=name, **env)
    try:
        w.wait_http_ready(timeout_s=timeout_s)
        seconds = time.monotonic() - t0
        s = stats(w)
    except BaseException:
        w.stop()
        raise
    if not keep:
        w.stop()
        return seconds, s, None
    return seconds, s, w


def wait_snapshots(
    snaps: Snapshots, topic: str, last: dict[int, int], timeout_s: float
) -> tuple[float, int]:
    """Wait until every partition's newest snapshot is at ``last``; (seconds, bytes)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        newest = {m.partition: m for m in snaps.list(topic)}
        if {p: m.offset for p, m in newest.items()} == last:
            return time.monotonic() - t0, sum(m.size for m in newest.values())
        time.sleep(1.0)
    raise TimeoutError(
        f"snapshots of {topic} never reached {last}: "
        f"{[(m.partition, m.offset) for m in snaps.list(topic)]}"
    )


def run(keys: int = 5_000_000, partitions: int = 4, interval_s: float = 5.0) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        # a start with nothing to recover (group join, topic checks): the floor of both figures,
        # so the worker's own session timeout (bench.workers.DEFAULT_SESSION)
        startup_s, _, _ = ready_in(
            new_names(broker, store_url="rocksdb://", **DEFAULT_SESSION), folder, "empty"
        )
        url = f"file://{folder / 'snapshots'}"
        names = new_names(
            broker,
            store_url="rocksdb://",
            snapshot_url=url,
            snapshot_interval_s=interval_s,
            **DEFAULT_SESSION,
        )
        topic = f"{names.env['ETJ_APP_ID']}-{TABLE}-changelog"
        asyncio.run(create_topics(broker.bootstrap, [topic], partitions))
        t0 = time.monotonic()
        counts = [0] * partitions

        def records() -> Any:
            for rec in changelog_records(topic, keys, partitions):
                counts[rec[3]] += 1
                yield rec

        asyncio.run(produce_bulk(broker.bootstrap, records(), partitions, exact_end=True))
        load_s = time.monotonic() - t0
        last = {p: n - 1 for p, n in enumerate(counts) if n}

        replay_s, replay_stats, w = ready_in(names, folder, "replay", keep=True)
        try:  # the same worker then snapshots what it replayed
            snap_wait_s, snap_bytes = wait_snapshots(
                Snapshots(url), topic, last, timeout_s=600 + 10 * interval_s
            )
        finally:
            w.stop()
        snap_s, snap_stats, _ = ready_in(names, folder, "restored")
        log = (folder / "restored.log").read_text(errors="replace")
    restored = re.findall(r"restored \S+ from snapshot .*? in ([\d.]+) s", log)
    replayed_keys = (replay_stats.get("tables") or {}).get(TABLE)
    restored_keys = (snap_stats.get("tables") or {}).get(TABLE)
    ok = (
        len(restored) >= len(last)
        and replayed_keys is not None
        and restored_keys is not None
        and abs(replayed_keys - keys) <= keys // 100
        and abs(restored_keys - keys) <= keys // 100
    )
    speedup = replay_s / snap_s if snap_s else None
    return {
        "name": "snapshot_restore",
        "keys": keys,
        "partitions": partitions,
        "snapshot_ready_s_5m_keys": round(snap_s, 2),
        "full_replay_ready_s_5m_keys": round(replay_s, 2),
        "snapshot_speedup": None if speedup is None else round(speedup, 1),
        "snapshot_keys_per_s": round(keys / snap_s),
        "full_replay_keys_per_s": round(keys / replay_s),
        "startup_s": round(startup_s, 2),
        "snapshot_bytes": snap_bytes,
        "snapshot_install_s": [float(x) for x in restored],
        "snapshot_upload_wait_s": round(snap_wait_s, 1),
        "keys_after_replay": replayed_keys,
        "keys_after_restore": restored_keys,
        "changelog_load_s": round(load_s, 1),
        "store": "file:// (local folder)",
        "data_load": "changelog written directly, batched producer, exact end offsets",
        "goal_s": READY.goal,
        "goal_speedup": SPEEDUP.goal,
        "goal_met": ok and READY.met(snap_s) and SPEEDUP.met(speedup or 0),
        "keys_ok": ok,
    }


BENCH = Bench(
    "snapshot_restore",
    run,
    (READY, REPLAY, SPEEDUP),
    # a new worker's empty disk: from snapshots vs a full replay, 5M keys
    suite=lambda quick, runs: {"keys": 200_000} if quick else {},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

"""Bootstrap from Spark vs today's path: a fresh worker joined with a 5,000,000-key movie
catalogue, end to end, in the same run on the same broker.

- **bootstrap** (``bootstrap_ready_s_5m_keys``): the catalogue is a Parquet file (the data lake
  a team keeps it in). The clock starts when ``python -m app.batch bootstrap --join movies``
  starts (Spark ``local[2]``: reads it, places each key in its Kafka partition, writes the
  changelog rows and one snapshot per partition into a ``file://`` store in the run's folder),
  and stops when a fresh worker started after it answers ``/ready/`` 200 (snapshots installed).
- **replay** (today's path): the catalogue produced into the movies topic (batched
  producer, the bench's data load, *counted*: a team would have to produce it), then a fresh
  worker reads it record by record through the join's per-record path until every movie is
  in (``records_in``). The worker runs with producer batching (``ETJ_PRODUCER_MAX_BATCH_SIZE``
  unset: its changelog writes are batched), as on a real Kafka; the bootstrap job's own
  changelog writes are batched too. In ``make bench`` the replay runs on the catalogue's first
  ``replay_keys`` (1,000,000) and its seconds are scaled to the whole catalogue
  (``replay.total_s_scaled``): the whole 5M replay took ~250-700 s, the largest part of
  ``make bench`` after the chaos run. The scaling is linear; a replay's cost per record does
  not fall as its RocksDB store grows (it rose: 33,104 records/s over 1M keys, 23,858 over 5M,
  performance log), so the scaled time, and the speedup, are floors. ``--replay-keys 0``
  replays the whole catalogue.

``bootstrap_speedup`` = replay seconds (scaled) ÷ bootstrap seconds. The worker's key count
(``/stats/``, RocksDB's estimate) must be the keys it was given within 1 % on both paths. Both
paths on RocksDB (``ETJ_STORE_URL=rocksdb://``), 4 partitions.

``python -m bench.bootstrap [--keys N] [--replay-keys N]`` (50M by hand:
docs/operating/bootstrap.md#figures)
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import Bench, Figure
from bench.workers import (
    DEFAULT_SESSION,
    bench_broker,
    new_names,
    records_in,
    start_worker,
    stats,
    wait_stats,
    workdir,
)
from tests.chaos.fleet import vm_rss_kb
from tests.harness import batched
from tests.kafka_io import create_topics, jbytes, produce_bulk

READY = Figure(
    "bootstrap_ready_s_5m_keys",
    goal=600,
    direction="<=",
    unit="s",
    note="Spark job + fresh worker ready, 5M keys, local[2], RocksDB, batched changelog writes",
)
SPEEDUP = Figure(
    "bootstrap_speedup",
    goal=5,
    note="today's path (produce + replay, producer batching) ÷ bootstrap",
)
T0 = 1_700_000_000_000
WORDS = ("the", "night", "return", "star", "last", "city", "love", "war", "of", "blue")
TABLE = "movies-joins"  # the versions are V rows of the join's ordered table (app.joins.keys)


def catalogue_rows(keys: int, seed: int = 3) -> Iterator[tuple[str, str, int]]:
    rnd = random.Random(seed)
    for i in range(keys):
        yield (
            f"m{i}",
            " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 5))),
            T0 - rnd.randrange(0, 10 * 365) * 86_400_000,
        )


def write_catalogue(path: Path, keys: int, chunk: int = 1_000_000) -> int:
    """The catalogue as Parquet (not timed: it exists in the lake); its bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [("movie_id", pa.string()), ("title", pa.string()), ("event_time", pa.int64())]
    )
    rows = catalogue_rows(keys)
    with pq.ParquetWriter(path, schema) as writer:
        done = 0
        while done < keys:
            n = min(chunk, keys - done)
            cols = list(zip(*(next(rows) for _ in range(n))))
            writer.write_table(
                pa.table(
                    [pa.array(cols[0]), pa.array(cols[1]), pa.array(cols[2], pa.int64())],
                    schema=schema,
                )
            )
            done += n
    return path.stat().st_size


def dimension_keys(s: dict[str, Any]) -> int:
    return int((s.get("tables") or {}).get(TABLE) or 0)


def bootstrap_path(
    broker: Any, folder: Path, parquet: Path, keys: int, partitions: int
) -> dict[str, Any]:
    url = f"file://{folder / 'snapshots'}"
    names = new_names(
        broker,
        store_url="rocksdb://",
        snapshot_url=url,
        builtin_joins="movies",
        partitions=partitions,
        **DEFAULT_SESSION,
    )
    asyncio.run(
        create_topics(broker.bootstrap, [names.movies_topic, names.ratings_topic], partitions)
    )
    t0 = time.monotonic()
    job = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.batch",
            "bootstrap",
            "--join",
            "movies",
            "--dimension",
            str(parquet),
            "--master",
            "local[2]",
            "--no-progress",
            "--wait-group-s",
            "0",
            "--workdir",
            str(folder),
        ],
        env={**os.environ, **names.env},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    job_s = time.monotonic() - t0
    if job.returncode != 0:
        raise RuntimeError(
            f"bootstrap failed ({job.returncode}):\n{job.stdout}\n{job.stderr[-4000:]}"
        )
    t1 = time.monotonic()
    w = start_worker(names, folder, name="bootstrapped")
    try:
        w.wait_http_ready(timeout_s=1800)
        ready_s = time.monotonic() - t1
        got = dimension_keys(stats(w))
    finally:
        w.stop()
    parts = [
        tuple(map(float, m))
        for m in re.findall(
            r"changelog ([\d.]+) s, database ([\d.]+) s, upload ([\d.]+) s", job.stdout
        )
    ]
    total = re.search(r"([\d,]+) changelog bytes, ([\d,]+) snapshot bytes", job.stdout)
    changelog_bytes, snap_bytes = (
        (int(x.replace(",", "")) for x in total.groups()) if total else (None, None)
    )
    installs = re.findall(
        r"restored \S+ from snapshot .*? in ([\d.]+) s",
        (folder / "bootstrapped.log").read_text(errors="replace"),
    )
    return {
        "job_s": round(job_s, 1),
        "worker_ready_s": round(ready_s, 1),
        "total_s": round(job_s + ready_s, 1),
        "keys_in_worker": got,
        "changelog_bytes": changelog_bytes,
        "snapshot_bytes": snap_bytes,
        "snapshot_install_s": [float(x) for x in installs],
        "per_partition_changelog_database_upload_s": parts,
        "job_output": job.stdout.strip().splitlines()[-1:],
    }


def replay_path(broker: Any, folder: Path, keys: int, partitions: int) -> dict[str, Any]:
    names = batched(
        new_names(
            broker,
            store_url="rocksdb://",
            builtin_joins="movies",
            partitions=partitions,
            **DEFAULT_SESSION,
        )
    )
    asyncio.run(
        create_topics(broker.bootstrap, [names.movies_topic, names.ratings_topic], partitions)
    )
    t0 = time.monotonic()

    def records() -> Iterator[tuple[str, bytes, bytes]]:
        for mid, title, t in catalogue_rows(keys):
            yield (
                names.movies_topic,
                mid.encode(),
                jbytes({"movie_id": mid, "title": title, "event_time": t}),
            )

    asyncio.run(produce_bulk(broker.bootstrap, records(), partitions))
    produce_s = time.monotonic() - t0
    t1 = time.monotonic()
    w = start_worker(names, folder, name="replayed")
    try:
        w.wait_http_ready(timeout_s=600)
        wait_stats(w, lambda s: records_in(w) >= keys, timeout_s=7200, every_s=1.0)
        consume_s = time.monotonic() - t1
        got = dimension_keys(stats(w))
    finally:
        w.stop()
    return {
        "produce_s": round(produce_s, 1),
        "consume_s": round(consume_s, 1),
        "total_s": round(produce_s + consume_s, 1),
        "keys_in_worker": got,
        "records_per_s": round(keys / consume_s),
    }


def broker_rss_mb(broker: Any) -> int | None:
    """The local broker's resident memory (tansu keeps every record in memory); None for
    ``ETJ_BOOTSTRAP``'s."""
    proc = getattr(broker, "proc", None)
    kb = vm_rss_kb(proc.pid) if proc is not None else None
    return None if kb is None else kb // 1024


def run(
    keys: int = 5_000_000, partitions: int = 4, replay: bool = True, replay_keys: int = 0
) -> dict[str, Any]:
    """``replay`` False: the bootstrap path only (the 50M run by hand: today's path would take
    ~45 minutes of it); ``replay_keys``: replay the catalogue's first N keys and scale (0: all
    of them)."""
    with bench_broker() as broker, workdir() as folder:
        parquet = folder / "catalogue.parquet"
        t0 = time.monotonic()
        parquet_bytes = write_catalogue(parquet, keys)
        write_s = time.monotonic() - t0
        boot = bootstrap_path(broker, folder, parquet, keys, partitions)
        boot["catalogue_write_s_not_counted"] = round(write_s, 1)
        boot["broker_rss_mb"] = broker_rss_mb(broker)
        n = min(replay_keys or keys, keys)
        today = replay_path(broker, folder, n, partitions) if replay else None
    if today is not None:
        today["keys"] = n
        today["total_s_scaled"] = round(today["total_s"] * keys / n, 1)
    ok = abs(boot["keys_in_worker"] - keys) <= keys // 100 and (
        today is None or abs(today["keys_in_worker"] - n) <= n // 100
    )
    speedup = today["total_s_scaled"] / boot["total_s"] if today and boot["total_s"] else None
    replay = today
    return {
        "name": "bootstrap",
        "keys": keys,
        "partitions": partitions,
        "catalogue_parquet_bytes": parquet_bytes,
        "bootstrap_ready_s_5m_keys": boot["total_s"],
        "bootstrap_speedup": None if speedup is None else round(speedup, 2),
        "bootstrap": boot,
        "replay": replay,
        "spark": "local[2]",
        "store": "file:// (local folder)",
        "batching": "bootstrap job's changelog writes batched (last record alone); replay "
        "path: catalogue produced batched, worker with producer batching",
        "goal_s": READY.goal,
        "goal_speedup": SPEEDUP.goal,
        "keys_ok": ok,
        "goal_met": ok
        and READY.met(boot["total_s"])
        and SPEEDUP.met(speedup or 0)
        and replay is not None,
    }


BENCH = Bench(
    "bootstrap",
    run,
    (READY, SPEEDUP),
    # a fresh worker joined with a 5M-key catalogue: Spark bootstrap vs replay
    suite=lambda quick, runs: {"keys": 200_000} if quick else {"replay_keys": 1_000_000},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

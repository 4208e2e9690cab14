"""Bench: a catalogue-sized dimension table in RocksDB — disk, memory and recovery per million.

The movies join keeps ``movies-dimension`` (movie id -> versions), which time does not purge: a
real catalogue has ~500 million movies. This measures, on this machine, what one million of them
cost in Faust's RocksDB store (``ETJ_STORE_URL=rocksdb://``):

1. **store**: the rows exactly as the join writes them (key: the JSON movie id, value: JSON
   ``[[event_time, title]]``), spread over the partitions by the producers' murmur2, written in
   changelog-recovery batches with Faust's own RocksDB options (``RocksDBOptions().open``) and the
   write path of its ``Store.apply_changelog_batch``. Figures: write rate (the floor of recovery
   time), disk after flush and after compaction, process RSS growth, RocksDB's memory (memtables,
   index/filter readers, block cache after random reads), reopen time (a restart that kept its
   volume) and point-read latency (what a rating's lookup costs).
2. **end to end** (``--e2e-movies``, smaller): real worker processes on the local broker. Worker A
   builds the table from the movies topic (so its changelog is the real one); then a worker with
   an empty data directory recovers it from the changelog (a pod without its volume), and one with
   A's directory restarts (only the changelog tail). Times are "until Worker ready" minus the same
   worker's start with nothing to recover.

Figures per million are extrapolated linearly from the sizes measured (printed as such). Nothing
here asserts a timing; ``measure()`` returns the figures.

``python -m bench.rocksdb_dimension [--movies N] [--e2e-movies N]`` (not part of ``make bench``).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import rocksdict
from faust.stores.rocksdb import RocksDBOptions

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Bench
from tests.kafka_io import partition_of

PARTITIONS = 4
T0 = 1_790_000_000_000


_WORDS = [
    "".join(random.Random(w).choices("abcdefghijklmnopqrstuvwxyz", k=3 + w % 7))
    for w in range(5000)
]


def title_of(i: int) -> str:
    """A title of 1-5 words from a 5,000-word vocabulary: about as compressible as real ones."""
    rng = random.Random(i)
    words = rng.choices(_WORDS, k=1 + rng.randrange(5))
    return " ".join(w.capitalize() for w in words) + f" ({1900 + rng.randrange(125)})"


def movie_row(i: int) -> tuple[str, bytes, bytes]:
    """(movie id, table key, table value) of movie ``i``, as the join stores them."""
    movie_id = f"tt{i:09d}"
    title = title_of(i)
    key = json.dumps(movie_id).encode()  # the table's JSON key serializer
    value = json.dumps([[T0 - (i % 10_000) * 86_400_000, title]]).encode()
    return movie_id, key, value


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def rocksdb_memory(dbs: list[rocksdict.Rdict]) -> dict[str, int]:
    """RocksDB's own accounting, summed over the partition databases."""
    props = {
        "memtables": "rocksdb.cur-size-all-mem-tables",
        "table_readers": "rocksdb.estimate-table-readers-mem",
        "block_cache": "rocksdb.block-cache-usage",
    }
    out = {}
    for name, prop in props.items():
        total = 0
        for db in dbs:
            try:
                total += int(db.property_int_value(prop) or 0)
            except Exception:  # a property this RocksDB build does not have
                pass
        out[name] = total
    return out


def measure_store(
    movies: int,
    folder: Path,
    batch: int = 1000,
    reads: int = 20_000,
) -> dict[str, Any]:
    """Part 1: load, size, reopen and read ``movies`` rows in Faust's RocksDB configuration."""
    opts = RocksDBOptions()
    paths = [folder / f"movies-dimension-{p}.db" for p in range(PARTITIONS)]
    rss0 = rss_bytes()
    dbs = [opts.open(p) for p in paths]
    batches = [rocksdict.WriteBatch(raw_mode=True) for _ in range(PARTITIONS)]
    pending = 0
    start = time.perf_counter()
    for i in range(movies):
        movie_id, key, value = movie_row(i)
        batches[partition_of(movie_id.encode(), PARTITIONS)].put(key, value)
        pending += 1
        if pending == batch:  # a recovery buffer's worth: one write per partition
            for p, wb in enumerate(batches):
                dbs[p].write(wb)
            batches = [rocksdict.WriteBatch(raw_mode=True) for _ in range(PARTITIONS)]
            pending = 0
    for p, wb in enumerate(batches):
        dbs[p].write(wb)
    load_s = time.perf_counter() - start
    rss_loaded = rss_bytes()
    mem_loaded = rocksdb_memory(dbs)
    for db in dbs:
        db.flush()
    disk_flushed = sum(dir_bytes(p) for p in paths)
    for db in dbs:
        db.compact_range(None, None)
    disk_compacted = sum(dir_bytes(p) for p in paths)
    for db in dbs:
        db.close()
    del dbs

    start = time.perf_counter()
    dbs = [opts.open(p) for p in paths]  # a restart that kept its volume
    reopen_s = time.perf_counter() - start
    rng = random.Random(1)
    start = time.perf_counter()
    found = 0
    for _ in range(reads):
        movie_id, key, _ = movie_row(rng.randrange(movies))
        found += dbs[partition_of(movie_id.encode(), PARTITIONS)].get(key) is not None
    read_s = time.perf_counter() - start
    mem_read = rocksdb_memory(dbs)
    rss_read = rss_bytes()
    for db in dbs:
        db.close()
    assert found == reads, "a movie written was not found"
    return {
        "movies": movies,
        "partitions": PARTITIONS,
        "recovery_batch": batch,
        "load_s": round(load_s, 2),
        "load_rows_per_s": round(movies / load_s),
        "disk_bytes_flushed": disk_flushed,
        "disk_bytes_compacted": disk_compacted,
        "rss_growth_bytes_loaded": rss_loaded - rss0,
        "rss_growth_bytes_after_reads": rss_read - rss0,
        "rocksdb_memory_loaded": mem_loaded,
        "rocksdb_memory_after_reads": mem_read,
        "reopen_s": round(reopen_s, 3),
        "point_reads": reads,
        "point_read_us": round(read_s / reads * 1e6, 1),
    }


# --- part 2: real workers on the local broker ---------------------------------------------------


def measure_end_to_end(movies: int, folder: Path) -> dict[str, Any]:
    """Part 2: recovery of the real changelog by real workers (see the module docstring)."""
    from aiokafka import AIOKafkaProducer

    from app.dev.local_broker import LocalBroker
    from tests.harness import Worker, make_names

    broker = LocalBroker(log_dir=folder / "broker").start()
    started: list[Worker] = []

    def worker(name: str) -> tuple[Worker, float]:
        """A worker whose data directory is ``<folder>/<name>-data`` (the harness's rule)."""
        env = {**names.env, "ETJ_STORE_URL": "rocksdb://", "ETJ_REVISIT_INTERVAL_S": "5"}
        w = Worker(env, folder, name=name)
        t = time.perf_counter()
        w.start()
        started.append(w)
        w.wait_ready(timeout_s=1800)
        return w, time.perf_counter() - t

    try:
        names = make_names(broker.url)
        first, empty_start_s = worker("builder")

        async def produce() -> None:
            producer = AIOKafkaProducer(
                bootstrap_servers=broker.url.replace("kafka://", ""),
                linger_ms=20,
                max_batch_size=256 * 1024,
            )
            await producer.start()
            try:
                futs = []
                for i in range(movies):
                    movie_id, _, _ = movie_row(i)
                    value = {
                        "movie_id": movie_id,
                        "title": title_of(i),
                        "event_time": T0 - (i % 10_000) * 86_400_000,
                    }
                    futs.append(
                        await producer.send(
                            names.movies_topic, json.dumps(value).encode(), key=movie_id.encode()
                        )
                    )
                await asyncio.gather(*futs)
            finally:
                await producer.stop()

        asyncio.run(produce())
        start = time.perf_counter()
        while True:
            status, body = first.get("/joins/")
            done = (
                status == 200
                and {j["name"]: j for j in body["joins"]}["movies"]["counters"]["records"] >= movies
            )
            if done:
                break
            if time.perf_counter() - start > 1800:
                raise TimeoutError("the builder did not take every movie")
            time.sleep(1)
        build_s = time.perf_counter() - start
        time.sleep(3)  # changelog flushed (batches of one)
        first.stop()
        builder_disk = dir_bytes(folder / "builder-data")

        fresh, fresh_s = worker("fresh")  # no volume: full recovery
        fresh.stop()
        shutil.copytree(folder / "builder-data", folder / "again-data")
        again, again_s = worker("again")  # the builder's volume, kept
        again.stop()
        return {
            "movies": movies,
            "build_rows_per_s": round(movies / build_s),
            "builder_datadir_bytes": builder_disk,
            "start_with_nothing_to_recover_s": round(empty_start_s, 1),
            "start_recovering_all_from_changelog_s": round(fresh_s, 1),
            "start_with_kept_volume_s": round(again_s, 1),
            "recovery_s": round(max(fresh_s - empty_start_s, 0.0), 1),
        }
    finally:
        for w in started:
            w.kill()
        broker.stop()


def measure(
    movies: int = 1_000_000, e2e_movies: int = 20_000, folder: Path | None = None
) -> dict[str, Any]:
    """Every figure of this bench, plus the per-million extrapolations."""
    own = folder is None
    folder = folder or Path(tempfile.mkdtemp(prefix="etj-bench-rocksdb-"))
    try:
        store = measure_store(movies, folder / "store")
        per_m = 1_000_000 / movies
        out: dict[str, Any] = {
            "store": store,
            "per_million_movies": {
                "disk_bytes": round(store["disk_bytes_compacted"] * per_m),
                "disk_bytes_uncompacted": round(store["disk_bytes_flushed"] * per_m),
                "index_and_filter_bytes": round(
                    store["rocksdb_memory_after_reads"]["table_readers"] * per_m
                ),
                "store_recovery_s": round(store["load_s"] * per_m, 1),
                "extrapolated_from": movies,
            },
        }
        if e2e_movies:
            e2e = measure_end_to_end(e2e_movies, folder / "e2e")
            out["end_to_end"] = e2e
            out["per_million_movies"]["changelog_recovery_s"] = round(
                e2e["recovery_s"] * 1_000_000 / e2e_movies, 1
            )
            out["per_million_movies"]["changelog_recovery_extrapolated_from"] = e2e_movies
        return out
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def report(figures: dict[str, Any]) -> str:
    s, m = figures["store"], figures["per_million_movies"]
    mb = 1024 * 1024
    lines = [
        f"RocksDB dimension table, {s['movies']:,} movies measured over {s['partitions']} "
        f"partitions (Faust's RocksDB options), extrapolated per million:",
        f"  disk            {m['disk_bytes'] / mb:8.1f} MiB / million after compaction "
        f"({m['disk_bytes_uncompacted'] / mb:.1f} MiB as flushed)",
        f"  index+filters   {m['index_and_filter_bytes'] / mb:8.1f} MiB / million (memory that "
        f"grows with the table)",
        f"  measured at {s['movies']:,}: process RSS +"
        f"{s['rss_growth_bytes_loaded'] / mb:.1f} MiB loading, "
        f"+{s['rss_growth_bytes_after_reads'] / mb:.1f} MiB after {s['point_reads']:,} random "
        f"reads (memtables {s['rocksdb_memory_loaded']['memtables'] / mb:.1f} MiB, block cache "
        f"{s['rocksdb_memory_after_reads']['block_cache'] / mb:.1f} MiB: both bounded, per "
        f"partition database, by Faust's 3 x 64 MiB write buffers and 2 GiB cache)",
        f"  point read      {s['point_read_us']} µs (random movie, warm process)",
        f"  store writes    {s['load_rows_per_s']:,} rows/s -> "
        f"{m['store_recovery_s']} s / million (the floor of a recovery)",
        f"  reopen          {s['reopen_s']} s (restart that kept its volume, "
        f"{s['movies']:,} movies)",
    ]
    if "end_to_end" in figures:
        e = figures["end_to_end"]
        lines += [
            f"End to end, {e['movies']:,} movies, real workers on the local broker:",
            f"  start, nothing to recover        {e['start_with_nothing_to_recover_s']} s",
            f"  start, recover all (no volume)   {e['start_recovering_all_from_changelog_s']} s"
            f" -> recovery {e['recovery_s']} s -> "
            f"{m['changelog_recovery_s']} s / million (extrapolated)",
            f"  start, kept volume               {e['start_with_kept_volume_s']} s",
            f"  the builder took                 {e['build_rows_per_s']:,} movies/s",
        ]
    return "\n".join(lines)


BENCH = Bench("rocksdb_dimension", measure, report=report)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

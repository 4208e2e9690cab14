"""One table partition's starting state, written by one Spark task of ``app.batch bootstrap``
(:mod:`app.batch.bootstrap`): the rows onto the table's changelog partition, then the same rows
as a RocksDB database, uploaded as the partition's snapshot at the last offset written.

No Spark and no Faust here: executors run it. What it must agree on with the worker:

- **rows**: one row per dimension version in the join's ordered table, ``V (key, event time,
  digest of the values)`` -> ``[event_time, *copied values]`` (:mod:`app.joins.keys`,
  :mod:`app.joins.state`), byte for byte what a worker writes for the same version (its key
  from :func:`app.joins.keys.version_key`, its value by orjson, Faust's ``json`` codec:
  :func:`version_rows`, held to the worker's own writes by tests/unit/test_bootstrap.py). No
  row grows with a key's history: a key with 100,000 versions is 100,000 small rows, not one
  that passes the request limit. :func:`history_rows` writes the layout before (one row per
  key), which a worker converts when it reads the key (the tests write old changelogs with it);
- **database**: a RocksDB database in raw mode, as Faust's store opens it, holding those rows and
  Faust's offset row (``Store.offset_key`` = the last changelog offset of the rows), so that a
  worker installing the snapshot replays only what the changelog holds after it
  (:mod:`app.state.snapshot_service`);
- **changelog**: the same rows, in key order, on the same partition: a worker that starts
  without the snapshot (a standby, a deleted or refused snapshot) replays them and ends with the
  same rows. A partition that holds rows already (an earlier attempt of the job that failed
  half way) is read first, and the database is what replaying all of it gives: its rows, then
  the new ones over them, so the snapshot stands for the whole changelog up to its offset
  whatever the earlier attempt wrote. The records are sent in batches, the last one alone: a
  broker that reports the first offset of the newest batch + 1 as the end of a partition
  (tansu, docs/contributing/findings.md#a-table-that-recovered-short) then still reports the
  true end. The offsets the broker gives the batches must follow each other from where the
  partition ended, with nothing in between: a record another producer wrote among them (a
  worker that ignored the job's marker) fails the task, since the snapshot would not hold it.

The database is built as one sorted SST file ingested into an empty database (RocksDB's bulk
load: no memtable, no compaction), and uploaded with :meth:`app.state.snapshot_store.Snapshots.upload`
(every file, then the manifest: a task that dies half way leaves nothing a worker lists).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.joins.keys import version_key

__all__ = [
    "Target",
    "PartitionState",
    "arrow_rows",
    "history_rows",
    "version_rows",
    "write_partition",
]

#: Faust's RocksDB store keeps the partition's changelog offset under this key
#: (``faust.stores.rocksdb.Store.offset_key``; checked by tests/unit/test_bootstrap.py)
OFFSET_KEY = b"__faust\0offset__"
#: records per produce batch at most (and :data:`BATCH_BYTES`); batches in flight at most
BATCH_RECORDS = 20_000
BATCH_BYTES = 900 * 1024
IN_FLIGHT = 8


@dataclass(frozen=True)
class Target:
    """Where one table's starting state goes, as the worker reads it; picklable (sent to the
    executors)."""

    changelog: str  # the table's changelog topic
    partitions: int
    fingerprint: str  # app.state.snapshot_service.table_fingerprint of the worker's table
    snapshot_url: str
    bootstrap_servers: str
    settings: Any  # app.settings.Settings: the executors' Kafka security (aiokafka_auth)
    max_row_bytes: int  # the producer's request limit: a bigger row can never be sent


@dataclass(frozen=True)
class PartitionState:
    """What one task wrote: the partition, its keys, the changelog offsets of its rows, the
    snapshot's bytes and how long each part took."""

    partition: int
    records: int  # catalogue records of the partition (versions, before duplicates are merged)
    keys: int
    first_offset: int
    last_offset: int
    changelog_bytes: int  # keys and values of the rows sent (record overhead not counted)
    snapshot_bytes: int
    changelog_s: float
    database_s: float
    upload_s: float


#: a character JSON escapes (orjson escapes these and nothing else)
_ESCAPED = re.compile(r'["\\\x00-\x1f]')


def _json_str(text: str) -> str:
    return f'"{text}"' if _ESCAPED.search(text) is None else orjson.dumps(text).decode()


def _json_other(value: Any) -> str:
    return orjson.dumps(value).decode()


#: the JSON writer of each field kind (app.joins.columns): ints by ``str``, the rest by orjson
#: unless a plain string (one call to orjson costs ~2 µs here; 5M rows: 10 s)
ENCODERS: dict[str, Callable[[Any], str]] = {
    "str": _json_str,
    "int": str,
    "float": _json_other,
    "bool": _json_other,
}


def history_rows(
    records: Iterable[tuple[Any, ...]],
    kinds: Sequence[str],
) -> list[tuple[bytes, bytes]]:
    """``(key, event_time, *copied values)`` records, any order, duplicates allowed -> the
    dimension table's rows ``(JSON key, JSON [[event_time, *values], ...])``, sorted by key
    bytes (RocksDB's order); each key's versions sorted, a version given twice kept once (as
    :func:`app.logic.histories.insert_version`). ``kinds``: of the event time and each copied
    value (``int``, ``str``, ``float``, ``bool``)."""
    enc = [ENCODERS[k] for k in kinds]
    ordered = sorted(records)  # by key, then version: a key's versions in a run, sorted
    rows: list[tuple[bytes, bytes]] = []
    key: Any = None
    versions: list[str] = []
    last: Any = None
    for rec in ordered:
        k, version = rec[0], tuple(rec[1:])
        if k != key:
            if versions:
                rows.append((_json_str(key).encode(), f"[{','.join(versions)}]".encode()))
            key, versions, last = k, [], None
        if version != last:
            versions.append(f"[{','.join(e(v) for e, v in zip(enc, version))}]")
            last = version
    if versions:
        rows.append((_json_str(key).encode(), f"[{','.join(versions)}]".encode()))
    rows.sort(key=lambda r: r[0])  # JSON bytes order differs from the keys' where escaped
    return rows


def version_rows(records: Iterable[Sequence[Any]]) -> list[tuple[bytes, bytes]]:
    """``(key, event_time, *copied values)`` records, any order, duplicates allowed -> the
    join table's version rows ``(V key, JSON [event_time, *values])``, sorted by key bytes
    (RocksDB's order), a version given twice kept once (the same key). A record whose copied
    values are all null is an end (a tombstone in an archive: a dimension's copied fields are
    required), written as the worker writes one: ``[event_time]``
    (:func:`app.logic.histories.end`)."""
    dumps = orjson.dumps
    rows = {}
    for rec in records:
        values = list(rec[2:])
        if all(v is None for v in values):
            values = []
        rows[version_key(rec[0], rec[1], values)] = dumps([rec[1], *values])
    return sorted(rows.items())


def arrow_version_rows(table: Any, columns: Sequence[str]) -> list[tuple[bytes, bytes]]:
    """:func:`version_rows` of an Arrow table whose ``columns`` are the key, the event time
    and the copied values."""
    if table.num_rows == 0:
        return []
    return version_rows(zip(*(table.column(c).to_pylist() for c in columns)))


def arrow_rows(
    table: Any,
    columns: Sequence[str],
    kinds: Sequence[str],
) -> list[tuple[bytes, bytes]]:
    """:func:`history_rows` of an Arrow table whose ``columns`` are the key, the event time and
    the copied values: the same rows, the common case written by Arrow's compute kernels
    (vectorized: a key with one version and no character JSON escapes, of int and string
    fields), the rest (a key's several versions, escapes, floats, booleans) by
    :func:`history_rows`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def pylist(t: Any) -> list[Any]:
        return list(zip(*(t.column(c).to_pylist() for c in columns)))

    if table.num_rows == 0 or any(k not in ("int", "str") for k in kinds):
        return history_rows(pylist(table), kinds)
    t = table.sort_by([(c, "ascending") for c in columns])
    keys = t.column(columns[0]).combine_chunks()
    n = t.num_rows
    same = pc.equal(keys.slice(0, n - 1), keys.slice(1)) if n > 1 else pa.array([], pa.bool_())
    no = pa.array([False])
    slow = pc.or_(pa.concat_arrays([no, same]), pa.concat_arrays([same, no]))  # key repeats
    texts = [columns[0], *(c for c, k in zip(columns[1:], kinds) if k == "str")]
    for c in texts:
        slow = pc.or_(slow, pc.match_substring_regex(t.column(c), _ESCAPED.pattern))
    fast, rest = t.filter(pc.invert(slow)), t.filter(slow)

    def text(col: Any) -> Any:
        return pc.binary_join_element_wise(pa.scalar('"'), col, pa.scalar('"'), "")

    parts: list[Any] = [pa.scalar("[[")]
    for i, (c, k) in enumerate(zip(columns[1:], kinds)):
        if i:
            parts.append(pa.scalar(","))
        parts.append(pc.cast(fast.column(c), pa.string()) if k == "int" else text(fast.column(c)))
    parts.append(pa.scalar("]]"))
    key_json = pc.cast(text(fast.column(columns[0])), pa.binary()).to_pylist()
    value_json = pc.cast(pc.binary_join_element_wise(*parts, ""), pa.binary()).to_pylist()
    rows = list(zip(key_json, value_json))
    rows += history_rows(pylist(rest), kinds)
    rows.sort(key=lambda r: r[0])  # JSON bytes order differs from the keys' where escaped
    return rows


class RowTooBig(ValueError):
    """A version's row does not fit in one produce request."""


async def _produce(
    target: Target, partition: int, rows: Sequence[tuple[bytes, bytes]], start: int
) -> tuple[int, int]:
    """Send ``rows`` to the changelog partition, whose end offset is ``start``; (first, last)
    offset the broker gave them."""
    from aiokafka import AIOKafkaProducer

    from app.kafka.security import aiokafka_auth

    producer = AIOKafkaProducer(
        bootstrap_servers=target.bootstrap_servers,
        acks="all",
        max_batch_size=BATCH_BYTES + 64 * 1024,
        max_request_size=max(target.max_row_bytes, BATCH_BYTES) + 65536,
        **aiokafka_auth(target.settings),
    )
    await producer.start()
    try:
        pending: list[tuple[Any, int]] = []
        first, expected = None, start

        async def settle(fut: Any, count: int) -> None:
            nonlocal first, expected
            base = (await fut).offset
            if base != expected:
                raise RuntimeError(
                    f"changelog {target.changelog}[{partition}]: a batch the job sent got offset "
                    f"{base}, where the partition ended at {expected}: another producer wrote "
                    "to it while the job ran (a worker of the join running?). No snapshot of "
                    "it was made; stop the writer and run the job again"
                )
            first = base if first is None else first
            expected = base + count

        def build(chunk: Sequence[tuple[bytes, bytes]]) -> Any:
            batch = producer.create_batch()
            for k, v in chunk:
                if len(k) + len(v) > target.max_row_bytes:
                    raise RowTooBig(
                        f"key {k[:80]!r}: its row takes {len(k) + len(v):,} bytes, "
                        f"over the request limit ({target.max_row_bytes:,}); raise "
                        "ETJ_PRODUCER_MAX_REQUEST_BYTES (and the broker's "
                        "message.max.bytes)"
                    )
                if batch.append(key=k, value=v, timestamp=None) is None:
                    raise RowTooBig(f"key {k[:80]!r} does not fit in a produce batch")
            return batch

        chunks: list[Sequence[tuple[bytes, bytes]]] = []
        start, size = 0, 0
        body = rows[:-1]
        for i, (k, v) in enumerate(body):
            size += len(k) + len(v) + 32
            if i + 1 - start >= BATCH_RECORDS or size >= BATCH_BYTES:
                chunks.append(body[start : i + 1])
                start, size = i + 1, 0
        if start < len(body):
            chunks.append(body[start:])
        chunks.append(rows[-1:])  # the last row alone (module docstring)
        for chunk in chunks:
            pending.append(
                (
                    await producer.send_batch(build(chunk), target.changelog, partition=partition),
                    len(chunk),
                )
            )
            if len(pending) >= IN_FLIGHT:
                await settle(*pending.pop(0))
        for fut, count in pending:
            await settle(fut, count)
        assert first is not None
        return first, expected - 1
    finally:
        await producer.stop()


async def _existing(target: Target, partition: int) -> tuple[dict[bytes, bytes | None], int]:
    """The rows the changelog partition holds (last value per key; None: deleted), read to
    the high watermark a Fetch reports (tansu under-reports ListOffsets after a batch); and
    that end offset."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    from app.kafka.security import aiokafka_auth

    tp = TopicPartition(target.changelog, partition)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=target.bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **aiokafka_auth(target.settings),
    )
    await consumer.start()
    rows: dict[bytes, bytes | None] = {}
    try:
        consumer.assign([tp])
        if (await consumer.end_offsets([tp]))[tp] == 0:
            return rows, 0  # the first attempt: nothing written yet
        await consumer.seek_to_beginning(tp)
        while True:
            got = await consumer.getmany(tp, timeout_ms=1000)
            for m in got.get(tp, ()):
                rows[m.key] = m.value
            high = consumer.highwater(tp)
            if high is not None and await consumer.position(tp) >= high:
                return rows, high
    finally:
        await consumer.stop()


def _database(folder: Path, rows: Sequence[tuple[bytes, bytes]], offset: int) -> None:
    """A RocksDB database at ``folder`` holding ``rows`` (sorted by key) and Faust's offset
    row: one SST file, ingested."""
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    sst = folder.with_name(folder.name + ".sst")
    writer = rocksdict.SstFileWriter(opts)
    writer.open(str(sst))
    for k, v in rows:
        writer[k] = v
    writer.finish()
    db = rocksdict.Rdict(str(folder), opts)
    try:
        db.ingest_external_file([str(sst)])
        db[OFFSET_KEY] = str(offset).encode()
        db.flush()
    finally:
        db.close()
        sst.unlink(missing_ok=True)


def write_partition(
    target: Target,
    partition: int,
    rows: Sequence[tuple[bytes, bytes]],
    records: int,
    workdir: str | None = None,
) -> PartitionState:
    """The changelog rows, then the database, then its snapshot (module docstring)."""
    from app.state.snapshot_store import Snapshots

    t0 = time.monotonic()
    earlier, end = asyncio.run(_existing(target, partition))
    sent = sum(len(k) + len(v) for k, v in rows)
    first, last = asyncio.run(_produce(target, partition, rows, end))
    t1 = time.monotonic()
    if earlier:  # what a replay of the whole partition gives (module docstring)
        earlier.update(rows)
        rows = sorted((k, v) for k, v in earlier.items() if v is not None)
    tmp = Path(tempfile.mkdtemp(prefix=f"etj-bootstrap-{partition}-", dir=workdir))
    try:
        folder = tmp / "db"
        _database(folder, rows, last)
        t2 = time.monotonic()
        m = Snapshots(target.snapshot_url).upload(
            folder, target.changelog, partition, last, target.fingerprint
        )
        t3 = time.monotonic()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    keys = len({k[: 5 + int.from_bytes(k[1:5], "big")] for k, _ in rows})  # app.joins.keys
    return PartitionState(
        partition, records, keys, first, last, sent, m.size, t1 - t0, t2 - t1, t3 - t2
    )

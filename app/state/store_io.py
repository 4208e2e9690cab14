"""A table's local store read and written directly, without Faust's Table API: ranges in key
order, the row at a range's edge, a batch's rows, the store's key estimate.

Faust has no public range-scan API, and a full-table scan to find one zone's cars would make a
zone update cost grow with the number of cars in *other* zones. Both stores etj supports can
scan a key range in order, each in its own way:

- ``rocksdb://``: Faust keeps one rocksdict ``Rdict`` per table partition (opened by
  :func:`app.compat.stores.db_for_partition`), keys are the serialized table keys, and a
  rocksdict iterator can ``seek``. The scan seeks to the low key of the partition's database
  and stops at the high key (also set as the iterator's upper bound, so RocksDB reads nothing
  beyond it). The database also holds Faust's own offset key (``Store.offset_key``); it is
  skipped.
- ``memory://``: a range table's memory store (:class:`app.compat.stores.SortedMemoryStore`)
  keeps its keys sorted (a ``SortedDict``, or :class:`~app.state.split_sorted.SplitSortedDict`
  for a table whose keys come in kinds); ``irange`` is the scan.

Keys are ``bytes``, stored and logged as they are, so that the stored order is byte order; see
:mod:`app.state.ordered_keys` for keys whose byte order is numeric order. What reaches into
Faust's private attributes is :mod:`app.compat.stores` (its accessors); the public side of the
range scans is :mod:`app.state.range_scan`. Tests: tests/unit/test_range_scan.py (both stores,
live writes, changelog recovery, the offset row).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import faust
import orjson
import rocksdict
from faust.stores.rocksdb import Store as RocksDBStore
from faust.types import TP

from app.compat.stores import (
    SortedMemoryStore,
    active_dbs,
    db_for_partition,
    key_partitions,
    value_decoder,
)
from app.state.split_sorted import SplitSortedDict

__all__ = ["DELETED", "StoreIO", "estimated_keys", "iter_range", "write_memory_row"]

#: the value that deletes a row (:func:`write_memory_row`; a batch's deleted rows in
#: :mod:`app.state.overlay`)
DELETED: Any = object()


def write_memory_row(data: Any, where: Any, partition: int, key: Any, value: Any) -> None:
    """Write one row of a memory store: ``data`` its mapping, ``where`` its key -> partition
    map (:func:`app.compat.stores.key_partitions`); ``value`` :data:`DELETED` deletes it. Per
    record on the hot path: kept a plain function."""
    if value is DELETED:
        data.pop(key, None)
        where.pop(key, None)
    else:
        data[key] = value
        where[key] = partition


def iter_range(
    table: faust.Table, lo: bytes, hi: bytes | None, partition: int
) -> Iterator[tuple[bytes, Any]]:
    """(key, decoded value) of ``lo <= key < hi`` in ``table``'s store, in key order."""
    store = table.data
    if isinstance(store, SortedMemoryStore):
        data: Any = store.data  # a SortedDict or a SplitSortedDict (RangeTable)
        if isinstance(data, SplitSortedDict):
            yield from data.items_range(lo, hi)
            return
        for key in list(data.irange(lo, hi, inclusive=(True, False))):
            yield key, data[key]
    elif isinstance(store, RocksDBStore):
        yield from _scan_rocksdb(store, lo, hi, partition)
    else:
        raise TypeError(
            f"table {table.name!r} has store {type(store).__name__}, which cannot "
            "scan a key range (define it with range_table)"
        )


def _scan_rocksdb(
    store: RocksDBStore, lo: bytes, hi: bytes | None, partition: int, decode: Any = None
) -> Iterator[tuple[bytes, Any]]:
    if not store.use_rocksdict:
        raise TypeError("range scans need the rocksdict driver of Faust's RocksDB store")
    db = db_for_partition(store)(partition)
    opts = rocksdict.ReadOptions()
    # no set_iterate_lower_bound: in rocksdict 0.3.x it sets the *upper* bound (a bug, seen on
    # 0.3.29: the scan of the last zone came back empty); seek(lo) is the lower end instead
    if hi is not None:
        opts.set_iterate_upper_bound(hi)
    it = db.iter(opts)
    it.seek(lo)
    decode = decode or value_decoder(store)
    while it.valid():
        key = it.key()
        if hi is not None and key >= hi:  # the bound already stops it; belt and braces
            break
        if key != store.offset_key:  # Faust's own bookkeeping row, 16 bytes like our keys
            yield key, decode(it.value())
        it.next()


def _edge_rocksdb(
    store: RocksDBStore, lo: bytes, hi: bytes | None, partition: int, last: bool
) -> tuple[bytes, Any] | None:
    """The first (``last``: the last) row ``lo <= key < hi`` of one partition's database."""
    it = db_for_partition(store)(partition).iter(rocksdict.ReadOptions())
    skip = store.offset_key
    if last:
        if hi is None:
            it.seek_to_last()
        else:
            it.seek_for_prev(hi)
        while it.valid() and ((hi is not None and it.key() >= hi) or it.key() == skip):
            it.prev()
        if it.valid() and it.key() >= lo:
            return it.key(), orjson.loads(it.value())
        return None
    it.seek(lo)
    while it.valid() and it.key() == skip:
        it.next()
    if it.valid() and (hi is None or it.key() < hi):
        return it.key(), orjson.loads(it.value())
    return None


def estimated_keys(table: faust.Table) -> int:
    """Keys in ``table``'s local store: RocksDB's own estimate for the active partitions
    (counting would read every key), else the table's length."""
    store = table.data
    if isinstance(store, RocksDBStore) and store.use_rocksdict:
        return sum(
            db.property_int_value("rocksdb.estimate-num-keys") or 0 for db in active_dbs(store)
        )
    return len(table)


class StoreIO:
    """One table's local store, read and written without Faust's Table API: the per-batch
    overlay of :mod:`app.state.overlay` reads rows it does not hold yet and writes a batch's
    changed rows at its end (its changelog rows are sent by the loop, not by Faust's ``on_key_set``).

    Keys and values are what the table's API would give: a ``json`` key table takes ``str`` /
    ``int`` keys, a range table ``bytes``; values are plain JSON. The memory store keeps them
    decoded (as Faust's does, and ``_key_partition`` so that a rebalance drops what another
    worker now owns, as Faust's recovery does for the rows it applied); RocksDB keeps the bytes
    of the changelog, one database per partition, a ``WriteBatch`` per partition and batch."""

    def __init__(self, table: faust.Table) -> None:
        self.table = table
        self.name = table.name
        self.bytes_keys = table.key_type is bytes
        self.changelog = table.changelog_topic.get_topic_name()

    @property
    def store(self) -> Any:
        return self.table.data

    def key_bytes(self, key: Any) -> bytes:
        """The changelog key of ``key`` (what Faust's json codec, orjson, writes)."""
        return key if self.bytes_keys else orjson.dumps(key)

    def _memory(self) -> Any:
        """The memory store's mapping, or None for RocksDB (the store is made on first use and
        kept by the table for its life)."""
        store = self.table.data
        if store is not self._store:
            self._store = store
            rocksdb = isinstance(store, RocksDBStore)
            self._data = None if rocksdb else store.data
            self._db_for = db_for_partition(store) if rocksdb else None
        return self._data

    _store: Any = None
    _data: Any = None
    #: RocksDB: partition -> its database (resolved with the store, as ``_data``)
    _db_for: Any = None

    def memory_data(self) -> Any:
        """The memory store's mapping (its keys as the table's, values decoded), or None for
        RocksDB: an ordered table's overlay reads it directly (app.state.overlay)."""
        return self._memory()

    def key_partitions(self) -> Any:
        """The memory store's key -> partition map (``Store._key_partition``: a rebalance
        drops the keys of the partitions it takes away), for an overlay writing the mapping
        directly (app.state.overlay)."""
        return key_partitions(self.store)

    def get(self, partition: int, key: Any) -> Any:
        data = self._memory()
        if data is not None:
            return data.get(key)
        raw = self._db_for(partition).get(self.key_bytes(key))
        return None if raw is None else orjson.loads(raw)

    def scan(self, partition: int, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, Any]]:
        """(key, value) of ``lo <= key < hi`` (a range table), in key order."""
        store = self.table.data
        if isinstance(store, RocksDBStore):
            return _scan_rocksdb(store, lo, hi, partition, orjson.loads)
        if isinstance(store, SortedMemoryStore) and isinstance(store.data, SplitSortedDict):
            return iter(store.data.items_range(lo, hi))  # no generator frame per scan
        return iter_range(self.table, lo, hi, partition)

    def edge(
        self, partition: int, lo: bytes, hi: bytes | None, last: bool = False
    ) -> tuple[bytes, Any] | None:
        """(key, value) of the first (``last``: the last) row ``lo <= key < hi`` of a range
        table, or None: one row read, not the range (the version before a time)."""
        store = self.table.data
        if isinstance(store, RocksDBStore):
            return _edge_rocksdb(store, lo, hi, partition, last)
        data: Any = store.data  # a SortedDict or a SplitSortedDict (RangeTable)
        if isinstance(data, SplitSortedDict):
            return data.edge_item(lo, hi, last)
        key = next(iter(data.irange(lo, hi, inclusive=(True, False), reverse=last)), None)
        return None if key is None else (key, data[key])

    def write(self, partition: int, rows: list[tuple[Any, bytes | None, Any]]) -> None:
        """Apply ``(key, encoded value or None to delete, value)`` rows to one partition."""
        store = self.table.data
        if isinstance(store, RocksDBStore):
            batch = rocksdict.WriteBatch(raw_mode=True)
            for key, raw, _ in rows:
                kb = self.key_bytes(key)
                if raw is None:
                    batch.delete(kb)
                else:
                    batch.put(kb, raw)
            db_for_partition(store)(partition).write(batch)
            return
        data, where = store.data, key_partitions(store)
        for key, raw, value in rows:
            write_memory_row(data, where, partition, key, DELETED if raw is None else value)

    def write_one(self, partition: int, key: Any, value: Any, raw: bytes | None = None) -> None:
        """Write one row at once (``value`` None: delete it): an ordered table's rows are
        written through, so that range scans read the store alone (:mod:`app.state.overlay`).
        ``raw``: ``value`` encoded already (RocksDB stores it as it is)."""
        data = self._memory()
        if data is not None:
            write_memory_row(
                data,
                key_partitions(self._store),
                partition,
                key,
                DELETED if value is None else value,
            )
            return
        db = self._db_for(partition)
        if value is None:
            db.delete(self.key_bytes(key))
        else:
            db.put(self.key_bytes(key), orjson.dumps(value) if raw is None else raw)

    def persist_offset(self, partition: int, offset: int) -> None:
        """The changelog offset a RocksDB partition's store holds (Faust's
        ``_on_changelog_sent``), so a restart that kept its volume replays only the tail."""
        store = self.table.data
        if isinstance(store, RocksDBStore):
            store.set_persisted_offset(TP(self.changelog, partition), offset)

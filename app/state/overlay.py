"""A batch's reads and writes of one table: read once from the store, its changelog rows
written once at the end.

Why: through Faust's Table API every read and write of a row costs its sensors, a
``__contains__``/``__getitem__`` pair and a changelog send per write (``on_key_set``); a join
read and wrote the same rows (a key's history, the partition's clock) several times per record.
Here a loop's batch goes through one :class:`Overlay` per table (as Quix Streams' per-partition
state transaction, ``state/base/transaction.py``): a row is read from the store at most once
per batch, and :meth:`Overlay.flush` hands each changed row to the changelog once — its last
value, or a tombstone — unless it is a *local* row (an index derived from other rows, rebuilt
from them on recovery: :mod:`app.joins.state`).

Two kinds of tables, two ways to reach the store:

- keyed tables (a key's history, a partition's clock, a car's position): rewritten by many
  records of a batch, so the store is written once, at :meth:`Overlay.flush` (RocksDB: one
  write batch per partition);
- ordered tables (bytes keys, range scans: a join's rows, a zone's cars): written through to
  the store at once, so that a range scan reads the store alone (no merge of the batch's
  writes into every scan); their rows are written about once per batch anyway.

Values are plain JSON (lists, dicts, numbers, strings): what the overlay holds is what the
store holds (the memory store keeps decoded values; RocksDB their bytes), so a value put must
not be changed afterwards — the engines build new lists.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import orjson
from faust.stores.rocksdb import Store as RocksDBStore
from sortedcontainers import SortedList

from app.state.split_sorted import SplitSortedDict
from app.state.store_io import DELETED, StoreIO, write_memory_row

__all__ = ["MemoryIO", "Overlay", "Row"]

_UNREAD = object()

#: one changelog row: (topic, partition, key bytes, value bytes or None for a tombstone)
Row = tuple[str, int, bytes, "bytes | None"]


class Overlay:
    """One table's rows read and written by the batch being handled (module docstring)."""

    def __init__(self, io: StoreIO | MemoryIO, logged_first: bytes | None = None) -> None:
        self.io = io
        #: an ordered table's rows whose key starts with this byte go to the changelog before
        #: the others of the batch (a join's versions before its joins: a crash between two
        #: rows must not leave a join naming a version that is not in the log; app.joins.state)
        self.logged_first = logged_first
        #: ordered tables write through to the store (module docstring)
        self.through = io.bytes_keys
        #: (partition, key) -> value as the batch sees it (None: absent; DELETED: deleted)
        self._rows: dict[tuple[int, Any], Any] = {}
        #: keyed tables: (partition, key) -> True if its change goes to the changelog, False
        #: if local only; ordered tables: (partition, key) -> the value for the changelog
        self._dirty: dict[tuple[int, Any], Any] = {}
        #: an ordered table in the memory store: its mapping's ``get`` (the store is the
        #: batch's view; resolved on first use, when the store exists)
        self._direct: Any = None
        #: with it, (the memory store's mapping, its key -> partition map) to write to
        self._direct_write: Any = None
        #: with it, when the mapping is split (app.state.split_sorted.SplitSortedDict, a join's
        #: rows): its own range scan and edge read, without StoreIO's checks of the store's
        #: kind on every call (a key's versions are read two or three times per record)
        self._direct_scan: Any = None
        self._direct_edge: Any = None

    def _resolve(self) -> None:
        """An ordered table in the memory store: read and write its mapping directly."""
        if self.through and self._direct is None:
            data = getattr(self.io, "memory_data", lambda: None)()
            if data is not None:
                self._direct = data.get
                self._direct_write = (
                    data,
                    cast(StoreIO, self.io).key_partitions(),
                )  # a store has data
                if isinstance(data, SplitSortedDict):
                    self._direct_scan = data.items_range
                    self._direct_edge = data.edge_item

    def get(self, partition: int, key: Any) -> Any:
        """The row's value (None: absent)."""
        direct = self._direct
        if direct is not None:
            return direct(key)
        self._resolve()
        if self._direct is not None:
            return self._direct(key)
        k = (partition, key)
        value = self._rows.get(k, _UNREAD)  # a miss is the usual case (a key's first read in
        if value is _UNREAD:  # the batch): no KeyError raised and caught
            value = self._rows[k] = self.io.get(partition, key)
        return None if value is DELETED else value

    def put(self, partition: int, key: Any, value: Any, *, local: bool = False) -> None:
        self._write(partition, key, value, local)

    def delete(self, partition: int, key: Any, *, local: bool = False) -> None:
        self._write(partition, key, DELETED, local)

    def _write(self, partition: int, key: Any, value: Any, local: bool) -> None:
        if self.through:
            if not local:
                self._dirty[(partition, key)] = value
            direct = self._direct_write
            if direct is None:
                self._resolve()
                direct = self._direct_write
            if direct is not None:  # the memory store (StoreIO.write_one's row, called direct)
                data, where = direct
                write_memory_row(data, where, partition, key, value)
                return
            if self._direct is None:
                self._rows[(partition, key)] = value
            if value is DELETED:
                self.io.write_one(partition, key, None)
                return
            # RocksDB: encoded once, for the store and the changelog row alike (a JSON value
            # is never bytes, so the dirty row's bytes say it is encoded: flush)
            raw = orjson.dumps(value)
            if not local:
                self._dirty[(partition, key)] = raw
            self.io.write_one(partition, key, value, raw)
            return
        k = (partition, key)
        self._rows[k] = value
        if not local or k not in self._dirty:
            self._dirty[k] = not local

    def scan(self, partition: int, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, Any]]:
        """(key, value) of ``lo <= key < hi``, in key order (an ordered table: the store has
        every write of the batch)."""
        scan = self._direct_scan
        if scan is not None:
            return iter(scan(lo, hi))
        return self.io.scan(partition, lo, hi)

    def edge(
        self, partition: int, lo: bytes, hi: bytes | None, last: bool = False
    ) -> tuple[bytes, Any] | None:
        """(key, value) of the first (``last``: the last) row ``lo <= key < hi`` of an ordered
        table, or None (the store has every write of the batch)."""
        edge = self._direct_edge
        if edge is not None:
            return edge(lo, hi, last)
        return self.io.edge(partition, lo, hi, last)

    @property
    def pending(self) -> int:
        """Rows changed and not flushed yet."""
        return len(self._dirty)

    def flush(self) -> list[Row]:
        """Write the changed rows to the store (keyed tables); their changelog rows (in
        first-write order, but an ordered table's ``logged_first`` rows before the others).
        The overlay is empty afterwards (the next batch reads the store)."""
        io = self.io
        topic = io.changelog
        out: list[Row] = []
        dumps, key_bytes = orjson.dumps, io.key_bytes
        if self.through:
            first = self.logged_first
            later: list[Row] = []
            for (partition, key), value in self._dirty.items():
                (out if first is None or key[:1] == first else later).append(
                    (
                        topic,
                        partition,
                        key,
                        None
                        if value is DELETED
                        else value
                        if type(value) is bytes
                        else dumps(value),
                    )
                )
            out += later
            self.clear()
            return out
        rows = self._rows
        encode_all = isinstance(io.store, RocksDBStore)
        per_partition: dict[int, list[tuple[Any, bytes | None, Any]]] = {}
        for (partition, key), logged in self._dirty.items():
            value = rows[(partition, key)]
            if value is DELETED:
                raw = None
            elif logged or encode_all:
                raw = dumps(value)
            else:
                raw = b""  # a local row of the memory store: kept decoded, never encoded
            batch = per_partition.get(partition)
            if batch is None:
                batch = per_partition[partition] = []
            batch.append((key, raw, value))
            if logged:
                out.append((topic, partition, key_bytes(key), raw))
        for partition, batch in per_partition.items():
            io.write(partition, batch)
        self.clear()
        return out

    def clear(self) -> None:
        """Forget the batch (after a flush, or when its records are dropped)."""
        self._rows.clear()
        self._dirty.clear()


class MemoryIO:
    """A store of plain dicts with :class:`~app.state.store_io.StoreIO`'s interface: the engine's
    rules and layout run over it with no Faust and no broker (tests/replay.py, benchmarks)."""

    changelog = "memory"
    store = None

    def __init__(self, bytes_keys: bool = True) -> None:
        self.bytes_keys = bytes_keys
        self.data: dict[tuple[int, Any], Any] = {}
        self._sorted: dict[int, SortedList] = {}

    def key_bytes(self, key: Any) -> bytes:
        return key if self.bytes_keys else orjson.dumps(key)

    def get(self, partition: int, key: Any) -> Any:
        return self.data.get((partition, key))

    def scan(self, partition: int, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, Any]]:
        keys = self._sorted.get(partition)
        if not keys:
            return iter(())
        return iter(
            [(k, self.data[(partition, k)]) for k in keys.irange(lo, hi, inclusive=(True, False))]
        )

    def edge(
        self, partition: int, lo: bytes, hi: bytes | None, last: bool = False
    ) -> tuple[bytes, Any] | None:
        keys = self._sorted.get(partition)
        if not keys:
            return None
        key = next(iter(keys.irange(lo, hi, inclusive=(True, False), reverse=last)), None)
        return None if key is None else (key, self.data[(partition, key)])

    def write_one(self, partition: int, key: Any, value: Any, raw: bytes | None = None) -> None:
        self.write(partition, [(key, None if value is None else b"", value)])

    def write(self, partition: int, rows: list[tuple[Any, bytes | None, Any]]) -> None:
        for key, raw, value in rows:
            k = (partition, key)
            if raw is None:
                if self.data.pop(k, None) is not None and self.bytes_keys:
                    self._sorted[partition].discard(key)
            else:
                if k not in self.data and self.bytes_keys:
                    self._sorted.setdefault(partition, SortedList()).add(key)
                self.data[k] = value

    def persist_offset(self, partition: int, offset: int) -> None:
        pass

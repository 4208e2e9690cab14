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
- ordered tables (bytes keys, range scans: a join's rows, a zone's cars), read by range within
  the batch that writes them: in the memory store written at once (a dict store and, for a
  key's rows, an insort), read directly from its split mapping
  (:class:`~app.state.split_sorted.SplitSortedDict`); on RocksDB kept in a write buffer
  (:mod:`app.state.write_buffer`) that every read merges with the store's iterator, and
  written once at :meth:`Overlay.flush`, one write batch per partition, each row encoded once
  for the store and the changelog. Before it, RocksDB was written through, one ``put`` per
  row: a third of a catalogue's replay (performance log, 2026-12-06).

The engine's reads within one key's rows (its versions, its joins) name the key's prefix, the
*group* (:meth:`Overlay.scan_in`, :meth:`Overlay.edge_in`, :meth:`Overlay.run_in`: a version
time's tie group in one search): no kind of key asked per read.

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

from app.state.ordered_keys import prefix_end
from app.state.split_sorted import SplitSortedDict
from app.state.store_io import DELETED, StoreIO, write_memory_row
from app.state.write_buffer import WriteBuffer

__all__ = ["MemoryIO", "Overlay", "Row"]

_UNREAD = object()
#: an ordered table's way to its store (Overlay._mode)
_UNRESOLVED, _SPLIT, _BUFFER, _PLAIN = 0, 1, 2, 3

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
        #: an ordered table (bytes keys, range reads); else a keyed one (module docstring)
        self.through = io.bytes_keys
        #: (partition, key) -> value as the batch sees it (None: absent; DELETED: deleted)
        self._rows: dict[tuple[int, Any], Any] = {}
        #: keyed tables: (partition, key) -> True if its change goes to the changelog, False
        #: if local only; ordered tables: (partition, key) -> the value for the changelog
        self._dirty: dict[tuple[int, Any], Any] = {}
        #: an ordered table's way to its store, resolved on first use (when the store exists):
        #: SPLIT (the memory store's SplitSortedDict, read and written directly), BUFFER
        #: (RocksDB: the batch's rows in a WriteBuffer, written once at the flush) or PLAIN
        #: (any other: written through, read through the StoreIO)
        self._mode = _UNRESOLVED
        self._split: Any = None  # SPLIT: the mapping
        self._where: Any = None  # SPLIT: its key -> partition map
        self._buffer: WriteBuffer | None = None  # BUFFER

    def _resolve(self) -> int:
        """An ordered table: how to reach its store (``_mode``)."""
        io = self.io
        data = getattr(io, "memory_data", lambda: None)()
        if isinstance(data, SplitSortedDict):
            self._split, self._where = data, cast(StoreIO, io).key_partitions()
            self._mode = _SPLIT
        elif isinstance(getattr(io, "store", None), RocksDBStore):
            sio = cast(StoreIO, io)
            table = sio.table
            self._buffer = WriteBuffer(
                sio.db_for,
                orjson.loads,
                DELETED,
                skip=sio.store.offset_key,
                point=getattr(table, "point_key", None),
                group=getattr(table, "group_key", None),
                by_first_byte=getattr(table, "kind_by_first_byte", False),
            )
            self._mode = _BUFFER
        else:
            self._mode = _PLAIN
        return self._mode

    def get(self, partition: int, key: Any) -> Any:
        """The row's value (None: absent)."""
        mode = self._mode
        if mode == _UNRESOLVED and self.through:
            mode = self._resolve()
        if mode == _SPLIT:
            return self._split.get(key)
        if mode == _BUFFER:
            assert self._buffer is not None
            value = self._buffer.get(partition, key, _UNREAD)
            if value is not _UNREAD:
                return None if value is DELETED else value
        k = (partition, key)
        value = self._rows.get(k, _UNREAD)  # a miss is the usual case (a key's first read in
        if value is _UNREAD:  # the batch): no KeyError raised and caught
            value = self._rows[k] = self.io.get(partition, key)
        return None if value is DELETED else value

    def store_empty(self, partition: int) -> bool:
        """Does the table's store hold no row of ``partition``? (a keyed table; asked once per
        batch by a reader that would otherwise read every key it meets)"""
        return self.io.is_empty(partition)

    def put(self, partition: int, key: Any, value: Any, *, local: bool = False) -> None:
        self._write(partition, key, value, local)

    def delete(self, partition: int, key: Any, *, local: bool = False) -> None:
        self._write(partition, key, DELETED, local)

    def get_point(self, partition: int, key: bytes) -> Any:
        """:meth:`get` of an ordered table's row that its kinds look up by point only (a
        join's id row: app.state.split_sorted)."""
        if self._mode == _SPLIT:
            return self._split.points.get(key)
        return self.get(partition, key)

    def put_point(self, partition: int, key: bytes, value: Any) -> None:
        """:meth:`put` of a local row of an ordered table that its kinds look up by point
        only (a join's id row)."""
        if self._mode == _SPLIT:
            self._split.set_point(key, value)
            self._where[key] = partition
        else:
            self._write(partition, key, value, True)

    def delete_point(self, partition: int, key: bytes) -> None:
        """:meth:`delete` of a local point row (:meth:`put_point`)."""
        if self._mode == _SPLIT:
            self._split.points.pop(key, None)
            self._where.pop(key, None)
        else:
            self._write(partition, key, DELETED, True)

    def delete_in(
        self, partition: int, group: bytes, lo: bytes, hi: bytes | None
    ) -> list[tuple[bytes, Any]]:
        """Delete the logged rows of ``group`` in ``[lo, hi)`` (tombstones in the changelog,
        in key order); the rows as they were. The memory store deletes them as one slice."""
        mode = self._mode
        if mode == _UNRESOLVED:
            mode = self._resolve()
        if mode == _SPLIT:
            rows = self._split.pop_in(group, lo, hi)
            dirty, where = self._dirty, self._where
            for k, _ in rows:
                dirty[(partition, k)] = DELETED
                where.pop(k, None)
            return rows
        rows = self.scan_in(partition, group, lo, hi)
        for k, _ in rows:
            self._write(partition, k, DELETED, False)
        return rows

    def put_in(self, partition: int, group: bytes, key: bytes, value: Any) -> None:
        """:meth:`put` of a logged row of an ordered table whose group (the prefix its kind
        groups it by: app.state.split_sorted) the caller knows: no kind asked."""
        mode = self._mode
        if mode == _SPLIT:
            self._dirty[(partition, key)] = value
            self._split.set_in(group, key, value)
            self._where[key] = partition
        elif mode == _BUFFER:
            assert self._buffer is not None
            self._dirty[(partition, key)] = True
            self._buffer.put(partition, key, value, group)
        else:
            self._write(partition, key, value, False)

    def _write(self, partition: int, key: Any, value: Any, local: bool) -> None:
        if self.through:
            mode = self._mode
            if mode == _UNRESOLVED:
                mode = self._resolve()
            if mode == _SPLIT:  # the memory store (StoreIO.write_one's row, called direct)
                if not local:
                    self._dirty[(partition, key)] = value
                write_memory_row(self._split, self._where, partition, key, value)
                return
            if mode == _BUFFER:  # RocksDB: kept, written at the flush
                assert self._buffer is not None
                if not local:
                    self._dirty[(partition, key)] = True
                self._buffer.put(partition, key, value)
                return
            if not local:
                self._dirty[(partition, key)] = value
            self._rows[(partition, key)] = value
            self.io.write_one(partition, key, None if value is DELETED else value)
            return
        k = (partition, key)
        self._rows[k] = value
        if not local or k not in self._dirty:
            self._dirty[k] = not local

    # --- an ordered table's reads: the store as the batch left it ------------------------------
    def scan(self, partition: int, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, Any]]:
        """(key, value) of ``lo <= key < hi``, in key order (an ordered table)."""
        mode = self._mode
        if mode == _UNRESOLVED:
            mode = self._resolve()
        if mode == _SPLIT:
            return iter(self._split.items_range(lo, hi))
        if mode == _BUFFER:
            assert self._buffer is not None
            return iter(self._buffer.scan(partition, lo, hi))
        return self.io.scan(partition, lo, hi)

    def edge(
        self, partition: int, lo: bytes, hi: bytes | None, last: bool = False
    ) -> tuple[bytes, Any] | None:
        """(key, value) of the first (``last``: the last) row ``lo <= key < hi`` of an ordered
        table, or None."""
        mode = self._mode
        if mode == _UNRESOLVED:
            mode = self._resolve()
        if mode == _SPLIT:
            return self._split.edge_item(lo, hi, last)
        if mode == _BUFFER:
            assert self._buffer is not None
            return self._buffer.edge(partition, lo, hi, last)
        return self.io.edge(partition, lo, hi, last)

    # ... within one group (``[lo, hi)`` inside the prefix ``group``: a key's versions, a key's
    # joins), the reads the engine makes per record: no kind asked, one search each
    def scan_in(
        self, partition: int, group: bytes, lo: bytes, hi: bytes | None, limit: int | None = None
    ) -> list[tuple[bytes, Any]]:
        """:meth:`scan` within ``group``, at most ``limit`` rows (None: all)."""
        mode = self._mode
        if mode == _SPLIT:
            return self._split.items_in(group, lo, hi, limit)
        if mode == _BUFFER:
            assert self._buffer is not None
            return self._buffer.scan(partition, lo, hi, group, limit)
        rows = list(self.scan(partition, lo, hi))
        return rows if limit is None else rows[:limit]

    def edge_in(
        self, partition: int, group: bytes, lo: bytes, hi: bytes | None, last: bool = False
    ) -> tuple[bytes, Any] | None:
        """:meth:`edge` within ``group``."""
        mode = self._mode
        if mode == _SPLIT:
            return self._split.edge_in(group, lo, hi, last)
        if mode == _BUFFER:
            assert self._buffer is not None
            return self._buffer.edge(partition, lo, hi, last, group)
        return self.edge(partition, lo, hi, last)

    def run_in(
        self, partition: int, group: bytes, lo: bytes, hi: bytes | None, last: bool, width: int
    ) -> list[tuple[bytes, Any]]:
        """The rows of ``group`` in ``[lo, hi)`` whose first ``width`` bytes are those of the
        first (``last``: the last) row there, in key order: one search for what an edge read
        and a range read found (a version time's tie group)."""
        mode = self._mode
        if mode == _SPLIT:
            return self._split.run_in(group, lo, hi, last, width)
        if mode == _BUFFER:
            assert self._buffer is not None
            return self._buffer.run(partition, lo, hi, last, width, group)
        row = self.edge(partition, lo, hi, last)
        if row is None:
            return []
        pre = row[0][:width]
        if last:  # every row in [pre, the edge] starts with pre, and none is after the edge
            return list(self.scan(partition, max(lo, pre), hi))
        end = prefix_end(pre)
        if hi is not None and (end is None or hi < end):
            end = hi
        return list(self.scan(partition, row[0], end))

    @property
    def pending(self) -> int:
        """Rows changed and not flushed yet."""
        buffered = self._buffer
        return len(self._dirty) + (0 if buffered is None else len(buffered.parts))

    def flush(self) -> list[Row]:
        """Write the changed rows to the store (keyed tables, and an ordered table on RocksDB:
        one write batch per partition); their changelog rows (in first-write order, but an
        ordered table's ``logged_first`` rows before the others), each row encoded once for
        both. The overlay is empty afterwards (the next batch reads the store)."""
        io = self.io
        topic = io.changelog
        out: list[Row] = []
        dumps, key_bytes = orjson.dumps, io.key_bytes
        if self.through:
            first = self.logged_first
            later: list[Row] = []
            encoded = self._write_buffered() if self._buffer is not None else None
            for (partition, key), value in self._dirty.items():
                if encoded is not None:
                    raw = encoded[partition][key]
                else:
                    raw = None if value is DELETED else dumps(value)
                (out if first is None or key[:1] == first else later).append(
                    (topic, partition, key, raw)
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

    def _write_buffered(self) -> dict[int, dict[bytes, bytes | None]]:
        """RocksDB: the batch's rows of an ordered table to the store, one write batch per
        partition; partition -> key -> its bytes (None: deleted), for the changelog rows."""
        assert self._buffer is not None
        dumps, deleted = orjson.dumps, DELETED
        encoded: dict[int, dict[bytes, bytes | None]] = {}
        for partition, rows in self._buffer.take().items():
            raws = encoded[partition] = {
                k: None if v is deleted else dumps(v) for k, v in rows.items()
            }
            cast(StoreIO, self.io).write_raw(partition, raws)
        return encoded

    def clear(self) -> None:
        """Forget the batch (after a flush, or when its records are dropped)."""
        self._rows.clear()
        self._dirty.clear()
        if self._buffer is not None:
            self._buffer.clear()


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

    def is_empty(self, partition: int) -> bool:
        return not any(p == partition for p, _ in self.data)

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

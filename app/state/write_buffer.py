"""A batch's rows of an ordered table on RocksDB: kept, readable in key order, and written once.

Why: an ordered table's rows (a join's versions and joins, a zone's cars) are read by range
within the batch that writes them (the version before an event, the joins after a version).
They were written through to RocksDB, one ``put`` per row, so that the store alone could answer
those reads: a catalogue's replay spent a third of each version in that ``put`` and as much in
the iterators of its reads (performance log, 2026-11-28), against one write per key per batch
for the layout before. RocksDB's answer is a write batch with an index (``WriteBatchWithIndex``),
which rocksdict does not offer; this is it, in the engine's terms:

- a batch's writes stay here (the last value of each row, or a deletion), indexed in key order
  the way the table splits its keys (:class:`~app.state.split_sorted.SplitSortedDict`'s kinds:
  point rows by key only, a key's rows per group, the rest sorted);
- a read merges them with the store's rows, read through **one iterator per partition and
  batch** (made at the batch's first read, moved by ``seek``: an iterator costs more to make
  than to move), which sees the store as it was when the batch began: the batch's own writes
  come from here only;
- :meth:`WriteBuffer.take` hands the rows over at the batch's end: the overlay writes them in
  one ``WriteBatch`` per partition, each row encoded once for the store and the changelog.

Faust-free (the store's database and decoder are given).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from typing import Any, cast

from sortedcontainers import SortedList

from app.state.ordered_keys import prefix_end

__all__ = ["WriteBuffer"]

_POINT, _GROUPED, _REST = 0, 1, 2


class _Part:
    """One partition's rows of the batch, and its store iterator."""

    __slots__ = ("rows", "groups", "rest", "it")

    def __init__(self) -> None:
        self.rows: dict[bytes, Any] = {}  # key -> value, or the deleted sentinel
        self.groups: dict[bytes, list[bytes]] = {}  # group -> its keys written, sorted
        self.rest: SortedList = SortedList()  # keys neither point nor grouped, sorted
        self.it: Any = None  # the store's iterator for this batch (made on first read)


class WriteBuffer:
    """A batch's writes to one ordered table, merged into its reads (module docstring).

    ``db_for(partition)``: the partition's rocksdict ``Rdict``; ``decode``: a stored value's
    bytes to the value; ``skip``: a store key that is no row (Faust's offset row); ``point``,
    ``group``: the table's kinds of keys (:class:`~app.state.range_scan.KindedRangeTable`;
    None: every key sorted), asked once per first byte when ``by_first_byte``."""

    def __init__(
        self,
        db_for: Callable[[int], Any],
        decode: Callable[[bytes], Any],
        deleted: Any,
        skip: bytes | None = None,
        point: Callable[[bytes], bool] | None = None,
        group: Callable[[bytes], bytes | None] | None = None,
        by_first_byte: bool = False,
    ) -> None:
        self.db_for, self.decode, self.deleted, self.skip = db_for, decode, deleted, skip
        self._point = point
        self._group = group
        self._by_first: dict[int, int] | None = {} if by_first_byte else None
        self.parts: dict[int, _Part] = {}

    # --- writes -------------------------------------------------------------------------------
    def _kind(self, key: bytes) -> int:
        by_first = self._by_first
        if by_first is not None and key:
            kind = by_first.get(key[0])
            if kind is None:
                kind = by_first[key[0]] = self._kind_of(key)
            return kind
        return self._kind_of(key)

    def _kind_of(self, key: bytes) -> int:
        if self._point is not None and self._point(key):
            return _POINT
        if self._group is not None and self._group(key) is not None:
            return _GROUPED
        return _REST

    def _part(self, partition: int) -> _Part:
        part = self.parts.get(partition)
        if part is None:
            part = self.parts[partition] = _Part()
        return part

    def put(self, partition: int, key: bytes, value: Any, group: bytes | None = None) -> None:
        """Row ``key`` is ``value`` (the deleted sentinel: deleted); ``group``: its group when
        the caller knows it (a grouped key)."""
        part = self._part(partition)
        rows = part.rows
        if key not in rows:
            kind = _GROUPED if group is not None else self._kind(key)
            if kind == _GROUPED:
                g = group
                if g is None:
                    assert self._group is not None  # the kind says the table groups keys
                    g = cast(bytes, self._group(key))
                keys = part.groups.get(g)
                if keys is None:
                    part.groups[g] = [key]
                else:
                    insort(keys, key)
            elif kind == _REST:
                part.rest.add(key)
        rows[key] = value

    def take(self) -> dict[int, dict[bytes, Any]]:
        """partition -> its rows of the batch (key -> value or the deleted sentinel), in first
        write order; the buffer is empty afterwards and its iterators are let go (the next
        batch reads the store as it is then)."""
        out = {p: part.rows for p, part in self.parts.items() if part.rows}
        self.parts = {}
        return out

    def clear(self) -> None:
        self.parts = {}

    # --- reads --------------------------------------------------------------------------------
    def get(self, partition: int, key: bytes, missing: Any) -> Any:
        """The batch's value of ``key`` (maybe the deleted sentinel), or ``missing``."""
        part = self.parts.get(partition)
        return missing if part is None else part.rows.get(key, missing)

    def _pending(
        self, part: _Part, lo: bytes, hi: bytes | None, group: bytes | None
    ) -> list[bytes]:
        """The batch's keys in ``[lo, hi)`` (deleted ones too), sorted."""
        # the kind of the bound's first byte, as real keys taught it (a bound is no key: it
        # must not teach it; unknown: every group is looked at)
        by_first = self._by_first
        kind = by_first.get(lo[0]) if by_first is not None and lo else None
        if group is None and hi and kind == _GROUPED and self._group is not None:
            g = self._group(lo)  # a range within one group (a zone's cars): that group only
            if g is not None and lo.startswith(g) and (hi.startswith(g) or hi == prefix_end(g)):
                group = g
        if group is not None:
            keys = part.groups.get(group)
            if not keys:
                return []
            i = bisect_left(keys, lo)
            return keys[i : len(keys) if hi is None else bisect_left(keys, hi, i)]
        out = list(part.rest.irange(lo, hi, inclusive=(True, False)))
        if part.groups:
            rest_only = (
                kind == _REST and bool(hi) and (hi[:1] == lo[:1] or hi == bytes([lo[0] + 1]))  # type: ignore[index]  # hi: bool() said so
            )
            if not rest_only:
                # a range that may hold grouped keys: every group's keys in it (no hot path)
                for keys in part.groups.values():
                    i = bisect_left(keys, lo)
                    out += keys[i : len(keys) if hi is None else bisect_left(keys, hi, i)]
                out.sort()
        return out

    def _iterator(self, partition: int, part: _Part) -> Any:
        it = part.it
        if it is None:
            it = part.it = self.db_for(partition).iter()
        return it

    def scan(
        self,
        partition: int,
        lo: bytes,
        hi: bytes | None,
        group: bytes | None = None,
        limit: int | None = None,
    ) -> list[tuple[bytes, Any]]:
        """(key, value) of ``lo <= key < hi``, the batch's rows over the store's, in key order;
        at most ``limit`` (None: all). ``group``: the one group ``[lo, hi)`` lies in, if any."""
        part = self._part(partition)
        rows, deleted, skip, decode = part.rows, self.deleted, self.skip, self.decode
        pending = self._pending(part, lo, hi, group) if rows else []
        it = self._iterator(partition, part)
        it.seek(lo)
        out: list[tuple[bytes, Any]] = []
        # the store's rows the batch did not write (the first ``limit`` of them are enough: the
        # merged order's first ``limit`` are among them and the batch's)
        want = limit
        while it.valid():
            k = it.key()
            if hi is not None and k >= hi:
                break
            if k != skip and k not in rows:
                out.append((k, decode(it.value())))
                if want is not None and len(out) >= want:
                    break
            it.next()
        if pending:
            out += [(k, rows[k]) for k in pending if rows[k] is not deleted]
            out.sort(key=_first)
        return out if limit is None else out[:limit]

    def edge(
        self,
        partition: int,
        lo: bytes,
        hi: bytes | None,
        last: bool = False,
        group: bytes | None = None,
    ) -> tuple[bytes, Any] | None:
        """(key, value) of the first (``last``: the last) row ``lo <= key < hi``."""
        part = self._part(partition)
        rows, deleted, skip = part.rows, self.deleted, self.skip
        it = self._iterator(partition, part)
        found: bytes | None = None
        if last:
            if hi is None:
                it.seek_to_last()
            else:
                it.seek_for_prev(hi)
            while it.valid():
                k = it.key()
                if k < lo:
                    break
                if (hi is None or k < hi) and k != skip and k not in rows:
                    found = k
                    break
                it.prev()
        else:
            it.seek(lo)
            while it.valid():
                k = it.key()
                if hi is not None and k >= hi:
                    break
                if k != skip and k not in rows:
                    found = k
                    break
                it.next()
        stored = None if found is None else (found, self.decode(it.value()))
        if not rows:
            return stored
        pending = [k for k in self._pending(part, lo, hi, group) if rows[k] is not deleted]
        if not pending:
            return stored
        mine = pending[-1] if last else pending[0]
        if found is None or (mine > found if last else mine < found):
            return mine, rows[mine]
        return stored

    def run(
        self,
        partition: int,
        lo: bytes,
        hi: bytes | None,
        last: bool,
        width: int,
        group: bytes | None = None,
    ) -> list[tuple[bytes, Any]]:
        """The rows in ``[lo, hi)`` whose first ``width`` bytes are those of the first
        (``last``: the last) row there, in key order."""
        row = self.edge(partition, lo, hi, last, group)
        if row is None:
            return []
        pre = row[0][:width]
        if last:  # every row in [pre, the edge] starts with pre, and none is after the edge
            return self.scan(partition, max(lo, pre), hi, group)
        end = prefix_end(pre)
        return self.scan(
            partition, row[0], end if hi is None or (end is not None and end < hi) else hi, group
        )


def _first(row: tuple[bytes, Any]) -> bytes:
    return row[0]

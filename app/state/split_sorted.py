"""A sorted mapping for a table whose keys come in kinds: the memory store of a join's rows, a
zone's cars, a foreign-key index (no Faust: a plain data structure).

A :class:`~app.state.range_scan.KindedRangeTable` gives its memory store one of these instead
of the ``SortedDict`` every range table's memory store keeps
(:class:`app.compat.stores.SortedMemoryStore`); the table's ``point_key``, ``group_key``,
``kind_by_first_byte`` and ``group_end`` say how its keys split. Faust writes it as any dict
(live writes, changelog recovery), etj's reads go through :mod:`app.state.store_io` and
:mod:`app.state.overlay`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from sortedcontainers import SortedDict

__all__ = ["SplitSortedDict"]


class SplitSortedDict(MutableMapping):
    """A sorted mapping (``irange`` like ``SortedDict``) for a table whose keys come in kinds
    (a join's rows, :mod:`app.joins.keys`; a zone's cars, :mod:`app.state.ordered_keys`):

    - keys ``point(key)`` says are looked up by point only (a join's id index): a plain dict;
    - keys ``group(key)`` puts in a group are scanned only within it (a key's joins, a zone's
      cars): a dict, and per group a sorted list of its keys (``bisect`` in C); a group is every
      key that starts with it, and ``group_end(group)`` the first key after them (the tables
      give :func:`app.state.ordered_keys.prefix_end`: this module knows no key encoding);
    - every other key (a join's expiry index): a ``SortedDict``.

    A row written costs a dict store and, for a grouped key, an insort into its group's list
    instead of a ``SortedDict`` insert (~1.5 µs of Python each, the most of a join's writes).
    ``irange`` within one group reads its list; any other range reads the ``SortedDict`` (and,
    should it span groups, every grouped key in it, sorted: not on any hot path).

    ``by_first_byte``: the table says a key's kind follows from its first byte (a join's
    ``J``/``I``/``X`` rows; a zone's cars, all grouped), so the kind is asked once per first
    byte and remembered: every read and write of the hot path finds its mapping with one dict
    lookup instead of two calls and two slices (~0.5 µs of each)."""

    def __init__(
        self,
        point: Callable[[bytes], bool] | None = None,
        group: Callable[[bytes], bytes | None] | None = None,
        by_first_byte: bool = False,
        group_end: Callable[[bytes], bytes | None] | None = None,
    ) -> None:
        self.sorted = SortedDict()
        self.points: dict[Any, Any] = {}
        self.grouped: dict[Any, Any] = {}
        #: group -> its keys, sorted (a group is what ``group(key)`` gives a grouped key)
        self.groups: dict[Any, list[bytes]] = {}
        self._point = point or (lambda key: False)
        self._group = group or (lambda key: None)
        self._group_end = group_end or (lambda group: None)
        #: first byte -> the mapping of keys that start with it (``by_first_byte``)
        self._by_first: dict[int, Any] | None = {} if by_first_byte else None

    def _map(self, key: Any) -> Any:
        by_first = self._by_first
        if by_first is not None and type(key) is bytes and key:
            m = by_first.get(key[0])
            if m is None:
                m = by_first[key[0]] = self._kind(key)
            return m
        return self._kind(key)

    def _kind(self, key: Any) -> Any:
        if isinstance(key, bytes):
            if self._point(key):
                return self.points
            if self._group(key) is not None:
                return self.grouped
        return self.sorted

    def __getitem__(self, key: Any) -> Any:
        return self._map(key)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        m = self._map(key)
        if m is self.grouped and key not in m:
            group = self._group(key)
            keys = self.groups.get(group)
            if keys is None:
                self.groups[group] = [key]
            else:
                insort(keys, key)
        m[key] = value

    def __delitem__(self, key: Any) -> None:
        m = self._map(key)
        del m[key]
        if m is self.grouped:
            self._unindex(key)

    def _unindex(self, key: bytes) -> None:
        group = self._group(key)
        keys = self.groups[group]
        i = bisect_left(keys, key)
        del keys[i]
        if not keys:
            del self.groups[group]

    def __contains__(self, key: Any) -> bool:
        return key in self._map(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self._map(key).get(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        m = self._map(key)
        if m is self.grouped:
            if key not in m:
                if default:
                    return default[0]
                raise KeyError(key)
            value = m.pop(key)
            self._unindex(key)
            return value
        return m.pop(key, *default)

    def __len__(self) -> int:
        return len(self.sorted) + len(self.points) + len(self.grouped)

    def __iter__(self) -> Iterator[Any]:
        yield from self.sorted
        yield from self.points
        yield from self.grouped

    def clear(self) -> None:
        self.sorted.clear()
        self.points.clear()
        self.grouped.clear()
        self.groups.clear()

    def irange(
        self, lo: Any = None, hi: Any = None, inclusive: tuple[bool, bool] = (True, True)
    ) -> Iterator[Any]:
        group = self._group(lo) if isinstance(lo, bytes) else None
        if group is not None and lo.startswith(group):
            if hi is not None and (hi.startswith(group) or hi == self._group_end(group)):
                keys = self.groups.get(group, ())
                i = bisect_left(keys, lo) if inclusive[0] else bisect_right(keys, lo)
                j = (
                    len(keys)
                    if hi is None
                    else (bisect_right(keys, hi) if inclusive[1] else bisect_left(keys, hi))
                )
                return iter(keys[i:j])
        inside = list(self.sorted.irange(lo, hi, inclusive=inclusive))
        if self.grouped:  # a range across groups (not on a hot path): every grouped key in it
            lo_ok = (
                (lambda k: True)
                if lo is None
                else ((lambda k: k >= lo) if inclusive[0] else (lambda k: k > lo))
            )
            hi_ok = (
                (lambda k: True)
                if hi is None
                else ((lambda k: k <= hi) if inclusive[1] else (lambda k: k < hi))
            )
            inside = sorted(inside + [k for k in self.grouped if lo_ok(k) and hi_ok(k)])
        return iter(inside)

    def items_range(self, lo: bytes, hi: bytes | None) -> list[tuple[bytes, Any]]:
        """(key, value) of ``lo <= key < hi``, in key order: :meth:`irange` with the values
        read from the mapping the keys are in (a key's versions, read for every event, would
        otherwise find their mapping once per row)."""
        group = self._group(lo) if isinstance(lo, bytes) else None
        if (
            group is not None
            and lo.startswith(group)
            and hi is not None
            and (hi.startswith(group) or hi == self._group_end(group))
        ):
            keys = self.groups.get(group)
            if not keys:
                return []
            m = self.grouped
            return [(k, m[k]) for k in keys[bisect_left(keys, lo) : bisect_left(keys, hi)]]
        return [(k, self[k]) for k in self.irange(lo, hi, inclusive=(True, False))]

    def edge_item(self, lo: bytes, hi: bytes | None, last: bool) -> tuple[bytes, Any] | None:
        """(key, value) of :meth:`edge`'s key, or None."""
        key = self.edge(lo, hi, last)
        return None if key is None else (key, self[key])

    def edge(self, lo: bytes, hi: bytes | None, last: bool) -> Any:
        """The first (``last``: the last) key ``lo <= key < hi``, or None: a bounded read of
        one row, whatever the size of its group (a hot key's 100,000 versions)."""
        group = self._group(lo) if isinstance(lo, bytes) else None
        if (
            group is not None
            and lo.startswith(group)
            and hi is not None
            and (hi.startswith(group) or hi == self._group_end(group))
        ):
            keys = self.groups.get(group, ())
            i, j = bisect_left(keys, lo), bisect_left(keys, hi)
            return None if i >= j else keys[j - 1 if last else i]
        inside = list(self.irange(lo, hi, inclusive=(True, False)))
        return (inside[-1] if last else inside[0]) if inside else None

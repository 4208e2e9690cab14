"""Ordered range scans over a table: what the car join's zone index and the per-join layout use.

Faust has no public range-scan API; the reads live in :mod:`app.state.store_io`, the stores
that can answer them in :mod:`app.compat.stores`. Keys are ``bytes`` whose byte order is the
order to scan by (:mod:`app.state.ordered_keys`).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, cast

import faust
from faust.exceptions import ImproperlyConfigured
from faust.types import AppT

from app.compat.stores import RangeTable, SortedMemoryStore
from app.state.ordered_keys import prefix_end
from app.state.split_sorted import SplitSortedDict
from app.state.store_io import iter_range

__all__ = [
    "KindedRangeTable",
    "RangeTable",
    "SortedMemoryStore",
    "range_table",
    "scan",
    "scan_prefix",
]


class KindedRangeTable(RangeTable):
    """A range table whose keys come in kinds (a join's rows, a zone's cars, a foreign-key
    index): its memory store keeps them in a :class:`~app.state.split_sorted.SplitSortedDict`,
    split as the table's ``point_key``, ``group_key``, ``kind_by_first_byte`` and ``group_end``
    say (neither of the first two: the ``SortedDict`` of any range table)."""

    def memory_mapping(self) -> MutableMapping[Any, Any] | None:
        point, group = getattr(self, "point_key", None), getattr(self, "group_key", None)
        if not (point or group):
            return None
        return SplitSortedDict(
            point,
            group,
            getattr(self, "kind_by_first_byte", False),
            getattr(self, "group_end", None),
        )


def range_table(app: AppT, name: str, **kwargs: Any) -> RangeTable:
    """Define a :class:`RangeTable` on ``app`` (what ``app.Table`` does for a plain table).

    Its keys are bytes in the order to scan by (``key_type=bytes``: raw in the store and in the
    changelog); values use ``value_type``/JSON as in any table.
    """
    if kwargs.setdefault("key_type", bytes) is not bytes:
        raise ImproperlyConfigured(f"range table {name!r} has bytes keys, not {kwargs['key_type']}")
    cls = kwargs.pop("table_class", RangeTable)
    table = cls(app, name=name, beacon=app.tables.beacon, **kwargs)
    return cast(RangeTable, app.tables.add(table))  # the table just made, as Faust adds it


def scan(
    table: faust.Table, lo: bytes, hi: bytes | None, partition: int
) -> Iterator[tuple[bytes, Any]]:
    """(key, value) of every key ``lo <= key < hi`` (``hi=None``: no upper end), in key order.

    ``partition`` is the table partition the keys live in (the current event's partition: a
    table key is written to the partition of the event that wrote it). Values are decoded as
    ``table[key]`` would return them. Reads only that range: cost O(log n + k). Lazy on
    RocksDB: do not write keys of the range while iterating.
    """
    return iter_range(table, lo, hi, partition)


def scan_prefix(table: faust.Table, prefix: bytes, partition: int) -> Iterator[tuple[bytes, Any]]:
    """(key, value) of every key that starts with ``prefix``, in key order (see :func:`scan`)."""
    return scan(table, prefix, prefix_end(prefix), partition)

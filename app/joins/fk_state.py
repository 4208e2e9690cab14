"""Where a foreign-key join's state lives: its three tables, their keys and their rows (the rules,
:mod:`app.logic.fk_join`, see only their values).

::

    left   left key                -> [event_time, fk, *left values, left_fk]
    right  right key               -> [event_time, *right values]
    index  (fk, left key) bytes    -> [event_time, *left values]

- ``left``: a left key's newest version, and the right key it last left (``null`` if none), so
  a re-delivered record can send that ``DEL`` again (:class:`app.logic.fk_join.Position`);
- ``right``: a right key's newest version;
- ``index``: the left rows now pointing at a right key. Its keys start with the right key, so a
  right key's rows are one key range: a right record finds them by one range scan, whose cost
  is their number, not the table's.

Index keys (:class:`IndexKeys`): when both keys are ints, the 16 bytes of
:mod:`app.state.ordered_keys` (the car join's ``zone-cars`` keys, byte for byte); otherwise the
foreign key's JSON prefixed by its length (4 bytes, big-endian), then the left key's JSON: a
right key's rows are the keys starting with its prefix, and the prefix ends where its length
says (the memory store's groups).

These rows are the bytes of every changelog and snapshot: the car join's are the bytes its
tables had before it was a spec (tests/unit/test_car_state.py, tests/agent/test_agent_car_join.py),
and any change to them is a state layout change (docs/operating/recovery.md#state-layout-changes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson

from app.logic.fk_join import Left, Position, Right
from app.state.ordered_keys import decode_zone_car, encode_zone_car, prefix_end, zone_prefix
from app.state.overlay import Overlay
from app.state.range_scan import KindedRangeTable, RangeTable, scan

__all__ = [
    "IndexKeys",
    "INT_KEYS",
    "IndexTable",
    "JSON_KEYS",
    "LeftRows",
    "IndexRows",
    "RightRows",
    "index_table_class",
    "left_rows_in",
    "position_of",
    "position_row",
    "right_of",
    "right_row",
]


# --- rows: the rules' values <-> what a table holds --------------------------------------------


def position_row(position: Position) -> list[Any]:
    left = position.left
    return [left.event_time, left.fk, *left.values, position.left_fk]


def position_of(key: Any, row: Sequence[Any]) -> Position:
    return Position(Left(key, row[1], tuple(row[2:-1]), row[0]), row[-1])


def right_row(right: Right) -> list[Any]:
    return [right.event_time, *right.values]


def right_of(key: Any, row: Sequence[Any]) -> Right:
    return Right(key, tuple(row[1:]), row[0])


def _index_row(left: Left) -> list[Any]:
    return [left.event_time, *left.values]


def _index_of(fk: Any, key: Any, row: Sequence[Any]) -> Left:
    return Left(key, fk, tuple(row[1:]), row[0])


# --- index keys -------------------------------------------------------------------------------


class IndexKeys:
    """How (fk, left key) become one byte key whose prefix is the fk's (module docstring)."""

    def __init__(
        self,
        encode: Callable[[Any, Any], bytes],
        decode: Callable[[bytes], tuple[Any, Any]],
        prefix: Callable[[Any], bytes],
        group_key: Callable[[bytes], bytes],
    ) -> None:
        self.encode, self.decode, self.prefix, self.group_key = encode, decode, prefix, group_key


def _json_prefix(fk: Any) -> bytes:
    raw = orjson.dumps(fk)
    return len(raw).to_bytes(4, "big") + raw


def _json_encode(fk: Any, key: Any) -> bytes:
    return _json_prefix(fk) + orjson.dumps(key)


def _json_group(key: bytes) -> bytes:
    return key[: 4 + int.from_bytes(key[:4], "big")]


def _json_decode(key: bytes) -> tuple[Any, Any]:
    n = 4 + int.from_bytes(key[:4], "big")
    return orjson.loads(key[4:n]), orjson.loads(key[n:])


#: two int keys: the 16 bytes of app.state.ordered_keys (the car join's zone-cars)
INT_KEYS = IndexKeys(encode_zone_car, decode_zone_car, zone_prefix, lambda key: key[:8])
#: any other keys: a length-prefixed JSON fk, then the left key's JSON
JSON_KEYS = IndexKeys(_json_encode, _json_decode, _json_prefix, _json_group)


class IndexTable(KindedRangeTable):
    """An index table: a right key's rows are only ever scanned together, so the memory store
    keeps them per right key (app.state.split_sorted.SplitSortedDict), a sorted list each."""

    kind_by_first_byte = True  # every row is grouped, whatever its first byte
    group_key = staticmethod(JSON_KEYS.group_key)
    group_end = staticmethod(prefix_end)  # where a right key's rows end


def index_table_class(keys: IndexKeys, int_class: type[RangeTable]) -> type[RangeTable]:
    """The table class of an index with these keys (``int_class``: the car join's, which its
    existing stores were made with)."""
    return int_class if keys is INT_KEYS else IndexTable


def left_rows_in(table: Any, keys: IndexKeys, fk: Any, partition: int) -> Iterator[Left]:
    """The left rows pointing at ``fk``, by a range scan of ``table`` (the index table, or a
    batch's :class:`~app.state.overlay.Overlay` of it), in key order."""
    lo = keys.prefix(fk)
    hi = prefix_end(lo)
    rows = (
        table.scan(partition, lo, hi)
        if isinstance(table, Overlay)
        else scan(table, lo, hi, partition)
    )
    for key, row in rows:
        _, left_key = keys.decode(key)
        yield _index_of(fk, left_key, row)


# --- the tables through a batch's overlay (the agents) -----------------------------------------


class LeftRows:
    """The left table, read and written as :class:`~app.logic.fk_join.Position`."""

    def __init__(self, rows: Overlay) -> None:
        self.rows = rows

    def get(self, partition: int, key: Any) -> Position | None:
        row = self.rows.get(partition, key)
        return None if row is None else position_of(key, row)

    def put(self, partition: int, position: Position) -> None:
        self.rows.put(partition, position.left.key, position_row(position))


class RightRows:
    """The right table, read and written as :class:`~app.logic.fk_join.Right`."""

    def __init__(self, rows: Overlay) -> None:
        self.rows = rows

    def get(self, partition: int, key: Any) -> Right | None:
        row = self.rows.get(partition, key)
        return None if row is None else right_of(key, row)

    def put(self, partition: int, right: Right) -> None:
        self.rows.put(partition, right.key, right_row(right))


class IndexRows:
    """The index table, read and written as the :class:`~app.logic.fk_join.Left` version that
    put a left row under a right key."""

    def __init__(self, rows: Overlay, keys: IndexKeys) -> None:
        self.rows, self.keys = rows, keys

    def get(self, partition: int, fk: Any, key: Any) -> Left | None:
        row = self.rows.get(partition, self.keys.encode(fk, key))
        return None if row is None else _index_of(fk, key, row)

    def put(self, partition: int, fk: Any, left: Left) -> None:
        self.rows.put(partition, self.keys.encode(fk, left.key), _index_row(left))

    def delete(self, partition: int, fk: Any, key: Any) -> None:
        self.rows.delete(partition, self.keys.encode(fk, key))

    def pointing_at(self, partition: int, fk: Any) -> Iterator[Left]:
        return left_rows_in(self.rows, self.keys, fk, partition)

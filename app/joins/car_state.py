"""Where the car join's state lives: its three tables, their keys and their rows (the rules,
:mod:`app.logic.car_join`, see only their values; docs/joins/car-zone.md).

::

    car-positions   car id                     -> [event_time, zone_id, fuel_level, left_zone]
    zone-pollution  zone id                    -> [event_time, pollution_level]
    zone-cars       (zone_id, car_id) 16 bytes -> [event_time, fuel_level]

- ``car-positions``: a car's newest arrival, and the zone it last left (``null`` if none), so a
  re-delivered arrival can send that ``DEL`` again (:class:`app.logic.car_join.CarPosition`);
- ``zone-pollution``: a zone's newest reading;
- ``zone-cars``: the cars now in a zone, each with the arrival that put it there. Its keys
  (:mod:`app.state.ordered_keys`) sort like ``(zone_id, car_id)``, so a zone's cars are one key range: a
  reading finds them by one range scan, whose cost is the zone's size, not the table's.

Ids are keys as they are (a JSON number in the changelog), except in ``zone-cars``. Nothing is
purged by event time: the tables hold *current* state, bounded by the number of cars and zones.

The car join is a foreign-key spec: its rows and keys are :mod:`app.joins.fk_state`'s (the
agents write them through it); this module says them in the car join's words for its views and
tests. Why one home: these keys and rows are the bytes of every changelog and snapshot, so any
change to them is a state layout change (docs/operating/recovery.md#state-layout-changes). The agents
(:mod:`app.agents.car_join`) write them and the views read them through this module alone, by
field name; tests/unit/test_car_state.py holds them to the bytes the code wrote before this
module existed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from app.joins import fk_state
from app.joins.fk_state import INT_KEYS, IndexRows, left_rows_in
from app.logic.car_join import (
    CarArrival,
    CarPosition,
    ZoneReading,
    to_arrival,
    to_left,
    to_reading,
    to_right,
)
from app.logic.fk_join import Position
from app.state.ordered_keys import prefix_end, zone_prefix
from app.state.overlay import Overlay
from app.state.range_scan import KindedRangeTable, scan

__all__ = [
    "CAR_POSITIONS",
    "CarPositions",
    "ZONE_CARS",
    "ZONE_POLLUTION",
    "ZoneCars",
    "ZoneCarsTable",
    "ZonePollution",
    "cars_in_zone",
    "position_of",
    "position_row",
    "reading_of",
    "reading_row",
    "zone_car_rows",
]

#: the tables' names (their changelogs: ``<app id>-<name>-changelog``)
CAR_POSITIONS, ZONE_POLLUTION, ZONE_CARS = "car-positions", "zone-pollution", "zone-cars"


# --- rows: the rules' values <-> what a table holds (app.joins.fk_state's, in car words) --------


def position_row(position: CarPosition) -> list[Any]:
    return fk_state.position_row(Position(to_left(position.arrival), position.left_zone))


def position_of(car_id: int, row: Sequence[Any]) -> CarPosition:
    p = fk_state.position_of(car_id, row)
    return CarPosition(to_arrival(p.left), p.left_fk)


def reading_row(reading: ZoneReading) -> list[Any]:
    right = to_right(reading)
    assert right is not None
    return fk_state.right_row(right)


def reading_of(zone_id: int, row: Sequence[Any]) -> ZoneReading:
    return to_reading(fk_state.right_of(zone_id, row))


# --- zone-cars: a zone's cars, one key range -----------------------------------------------------


class ZoneCarsTable(KindedRangeTable):
    """zone-cars: a zone's cars are only ever scanned together, so the memory store keeps them
    per zone (app.state.split_sorted.SplitSortedDict), a sorted list each."""

    kind_by_first_byte = True  # every row is grouped, whatever its first byte

    @staticmethod
    def group_key(key: bytes) -> bytes:
        return key[:8]  # the zone id (app.state.ordered_keys: 8 bytes of zone, 8 of car)

    group_end = staticmethod(prefix_end)  # where a zone's cars end


def zone_car_rows(table: Any, zone_id: int, partition: int) -> Iterator[tuple[bytes, Any]]:
    """(key, row) of the cars of one zone in key order, by a range scan of ``table``: the
    zone-cars table, or a batch's :class:`~app.state.overlay.Overlay` of it."""
    lo = zone_prefix(zone_id)
    hi = prefix_end(lo)
    if isinstance(table, Overlay):
        return table.scan(partition, lo, hi)
    return scan(table, lo, hi, partition)


def cars_in_zone(table: Any, zone_id: int, partition: int) -> Iterator[CarArrival]:
    """The cars of one zone, each as the arrival that put it there, by car id (see
    :func:`zone_car_rows`; bench/zone_fanout.py times this very code)."""
    return (to_arrival(left) for left in left_rows_in(table, INT_KEYS, zone_id, partition))


# --- the tables through a batch's overlay (the agents) -----------------------------------------


class CarPositions:
    """car-positions, read and written as :class:`~app.logic.car_join.CarPosition`."""

    def __init__(self, rows: Overlay) -> None:
        self.rows = rows

    def get(self, partition: int, car_id: int) -> CarPosition | None:
        row = self.rows.get(partition, car_id)
        return None if row is None else position_of(car_id, row)

    def put(self, partition: int, position: CarPosition) -> None:
        self.rows.put(partition, position.arrival.car_id, position_row(position))


class ZonePollution:
    """zone-pollution, read and written as :class:`~app.logic.car_join.ZoneReading`."""

    def __init__(self, rows: Overlay) -> None:
        self.rows = rows

    def get(self, partition: int, zone_id: int) -> ZoneReading | None:
        row = self.rows.get(partition, zone_id)
        return None if row is None else reading_of(zone_id, row)

    def put(self, partition: int, reading: ZoneReading) -> None:
        self.rows.put(partition, reading.zone_id, reading_row(reading))


class ZoneCars:
    """zone-cars, read and written as the :class:`~app.logic.car_join.CarArrival` that put a
    car in a zone (:class:`app.joins.fk_state.IndexRows` with the 16-byte keys)."""

    def __init__(self, rows: Overlay) -> None:
        self.rows = rows
        self._index = IndexRows(rows, INT_KEYS)

    def get(self, partition: int, zone_id: int, car_id: int) -> CarArrival | None:
        left = self._index.get(partition, zone_id, car_id)
        return None if left is None else to_arrival(left)

    def put(self, partition: int, zone_id: int, arrival: CarArrival) -> None:
        self._index.put(partition, zone_id, to_left(arrival))

    def delete(self, partition: int, zone_id: int, car_id: int) -> None:
        self._index.delete(partition, zone_id, car_id)

    def in_zone(self, partition: int, zone_id: int) -> Iterator[CarArrival]:
        return cars_in_zone(self.rows, zone_id, partition)

"""The one-to-many car join as pure rules: car positions x zone pollution (docs/joins/car-zone.md).

The car join is a foreign-key join: its rules are :mod:`app.logic.fk_join`'s (the agents run
them directly); this module says them in the car join's words, for its tests, oracle and views.

Two sides, each a small state machine the Faust agents drive (they only load/store state and
send what these functions return; the property tests drive them directly). How the values are
stored, keys and rows, is :mod:`app.joins.car_state`'s alone:

- car side, keyed by car id: the car's current position is its newest arrival. A newer arrival
  in another zone yields the moves ``DEL`` (old zone) and ``ADD`` (new zone); these go to an
  internal topic keyed by zone id, so they reach the zone side's partitions.
- zone side, keyed by zone id: the zone's newest pollution reading, and its cars under
  (zone_id, car_id) keys. ``ADD`` stores the car and joins it with the reading, ``DEL`` removes
  it, a newer reading joins every car of the zone.

Order ("newest"): a total order, so that every answer is deterministic whatever the arrival order.
- arrivals of one car compare by ``(event_time, to_zone_id, fuel_level)``: ties on event time go
  to the greater zone id, then the greater fuel level;
- readings of one zone compare by ``(event_time, pollution_level)``;
- outputs of one car compare by :func:`output_order`: arrival order first, then reading order
  (no reading sorts first). This is the consumer rule: keep the greatest output per car.

Re-delivery (at-least-once): a record equal to the current one is not ignored: it yields its
moves/outputs again, so outputs lost in a crash between saving state and sending come back when
the input is re-consumed. Duplicates are harmless under the consumer rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, overload

from app.logic import fk_join as fk

Op = Literal["ADD", "DEL"]
ArrivalOrder = tuple[int, int, float]  # (event_time, to_zone_id, fuel_level)
ReadingOrder = tuple[int, float]  # (event_time, pollution_level)


@dataclass(frozen=True, slots=True)
class CarArrival:
    """``etj-car-arrivals``: car ``car_id`` entered zone ``to_zone_id`` at ``event_time``."""

    car_id: int
    to_zone_id: int
    fuel_level: float
    event_time: int

    @property
    def order(self) -> ArrivalOrder:
        return (self.event_time, self.to_zone_id, self.fuel_level)


@dataclass(frozen=True, slots=True)
class ZoneReading:
    """``etj-zones``: zone ``zone_id`` had ``pollution_level`` from ``event_time`` on."""

    zone_id: int
    pollution_level: float
    event_time: int

    @property
    def order(self) -> ReadingOrder:
        return (self.event_time, self.pollution_level)


@dataclass(frozen=True, slots=True)
class Move:
    """Internal ``car-moves`` record, keyed by ``zone_id``: the car enters/leaves that zone.

    ``arrival`` is the arrival that caused the move: for ``ADD`` it is the car's new position in
    ``zone_id``; for ``DEL`` it went elsewhere (``arrival.to_zone_id != zone_id``), and only an
    entry older than it is removed, so a re-delivered ``DEL`` never removes a newer ``ADD``.
    """

    op: Op
    zone_id: int
    arrival: CarArrival

    def to_wire(self) -> dict[str, Any]:
        a = self.arrival
        return {
            "op": self.op,
            "zone_id": self.zone_id,
            "car_id": a.car_id,
            "to_zone_id": a.to_zone_id,
            "fuel_level": a.fuel_level,
            "event_time": a.event_time,
        }


@dataclass(frozen=True, slots=True)
class CarPollution:
    """One record of ``etj-car-pollution`` (docs/joins/topics.md), keyed by car id."""

    car_id: int
    zone_id: int
    fuel_level: float
    pollution_level: float | None
    car_event_time: int
    zone_event_time: int | None

    def to_wire(self) -> dict[str, Any]:
        return {
            "car_id": self.car_id,
            "zone_id": self.zone_id,
            "fuel_level": self.fuel_level,
            "pollution_level": self.pollution_level,
            "car_event_time": self.car_event_time,
            "zone_event_time": self.zone_event_time,
        }

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> CarPollution:
        return cls(
            raw["car_id"],
            raw["zone_id"],
            raw["fuel_level"],
            raw["pollution_level"],
            raw["car_event_time"],
            raw["zone_event_time"],
        )


def join(arrival: CarArrival, reading: ZoneReading | None) -> CarPollution:
    """The output for a car at ``arrival`` under its zone's ``reading`` (None: unknown yet)."""
    return CarPollution(
        arrival.car_id,
        arrival.to_zone_id,
        arrival.fuel_level,
        None if reading is None else reading.pollution_level,
        arrival.event_time,
        None if reading is None else reading.event_time,
    )


def output_order(out: CarPollution) -> tuple[Any, ...]:
    """The consumer rule's order: keep, per car, the output with the greatest value of this.

    Arrival order, then reading order; an output without a reading sorts below any with one.
    """
    reading = (
        (-1, float("-inf"))
        if out.zone_event_time is None or out.pollution_level is None
        else (out.zone_event_time, out.pollution_level)
    )
    return (out.car_event_time, out.zone_id, out.fuel_level, *reading)


def newest_per_car(outputs: Iterable[CarPollution]) -> dict[int, CarPollution]:
    """What a consumer of ``etj-car-pollution`` keeps: per car, the greatest
    :func:`output_order`."""
    best: dict[int, CarPollution] = {}
    for out in outputs:
        cur = best.get(out.car_id)
        if cur is None or output_order(out) >= output_order(cur):
            best[out.car_id] = out
    return best


# --- the generic rules' values in the car join's words -------------------------------------


def to_left(a: CarArrival) -> fk.Left:
    """An arrival as the generic rules' left version (and back: :func:`to_arrival`)."""
    return fk.Left(a.car_id, a.to_zone_id, (a.fuel_level,), a.event_time)


def to_arrival(left: fk.Left) -> CarArrival:
    return CarArrival(left.key, left.fk, left.values[0], left.event_time)


@overload
def to_right(z: ZoneReading) -> fk.Right: ...
@overload
def to_right(z: ZoneReading | None) -> fk.Right | None: ...


def to_right(z: ZoneReading | None) -> fk.Right | None:
    """A reading as the generic rules' right version (and back: :func:`to_reading`)."""
    return None if z is None else fk.Right(z.zone_id, (z.pollution_level,), z.event_time)


def to_reading(right: fk.Right) -> ZoneReading:
    return ZoneReading(right.key, right.values[0], right.event_time)


def _move(m: fk.Move) -> Move:
    return Move(m.op, m.fk, to_arrival(m.left))


def _output(j: fk.Joined) -> CarPollution:
    return join(to_arrival(j.left), None if j.right is None else to_reading(j.right))


# --- car side: car id -> CarPosition ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CarPosition:
    """A car's newest arrival, and the zone it last left (to re-send that ``DEL`` on replay)."""

    arrival: CarArrival
    left_zone: int | None = None

    def moves(self) -> list[Move]:
        """The moves that put the car where it is now (DEL first, as they were first sent)."""
        return [_move(m) for m in fk.Position(to_left(self.arrival), self.left_zone).moves()]


def apply_arrival(
    position: CarPosition | None, arrival: CarArrival
) -> tuple[CarPosition | None, list[Move]]:
    """Apply one arrival (:func:`app.logic.fk_join.apply_left`): (the new position to store,
    or None to keep the old; moves to send).

    - first arrival of the car: ADD;
    - newer than the position, other zone: DEL old zone, ADD new zone (a real move);
    - newer, same zone: ADD (updates fuel level and car event time, no DEL);
    - equal to the position (re-delivery): the position's moves again, nothing to store;
    - older: nothing at all (an old arrival arriving late never moves the car back).
    """
    old = None if position is None else fk.Position(to_left(position.arrival), position.left_zone)
    new, moves = fk.apply_left(old, to_left(arrival))
    return (
        None if new is None else CarPosition(to_arrival(new.left), new.left_fk),
        [_move(m) for m in moves],
    )


# --- zone side: zone id -> ZoneReading; (zone id, car id) -> the car's arrival -----------------


def apply_add(
    stored: CarArrival | None, move: Move, reading: ZoneReading | None
) -> tuple[bool, CarPollution | None]:
    """ADD (:func:`app.logic.fk_join.apply_add`): (store ``move.arrival`` under (zone, car)?,
    the output to send). An ADD older than the stored entry (possible only through
    re-delivery) changes nothing."""
    store, out = fk.apply_add(
        None if stored is None else to_left(stored),
        fk.Move(move.op, move.zone_id, to_left(move.arrival)),
        to_right(reading),
    )
    return store, None if out is None else _output(out)


def apply_del(stored: CarArrival | None, move: Move) -> bool:
    """DEL: remove the (zone, car) entry? Only if it is older than the arrival that moved it."""
    return fk.apply_del(
        None if stored is None else to_left(stored),
        fk.Move(move.op, move.zone_id, to_left(move.arrival)),
    )


def apply_reading(
    stored: ZoneReading | None, reading: ZoneReading, cars: Iterable[CarArrival]
) -> tuple[bool, list[CarPollution]]:
    """A reading (:func:`app.logic.fk_join.apply_right`): (store it?, one output per car of
    the zone).

    ``cars`` is only iterated when the reading is not older than the stored one (pass a lazy
    range scan). An equal reading (re-delivery) re-emits the outputs without storing.
    """
    right = to_right(reading)
    assert right is not None
    store, outs = fk.apply_right(to_right(stored), right, (to_left(c) for c in cars))
    return store, [_output(o) for o in outs]


# --- the reference answer ---------------------------------------------------------------------


def exact_car_view(
    arrivals: Iterable[CarArrival], zones: Iterable[ZoneReading]
) -> dict[int, CarPollution]:
    """Brute-force reference answer (:func:`app.logic.fk_join.exact_view`): car id -> its
    output. Order of input is irrelevant.

    Per car, the greatest arrival by ``(event_time, to_zone_id, fuel_level)`` gives its zone and
    fuel; that zone's greatest reading by ``(event_time, pollution_level)`` its pollution (none:
    null). The batch twin uses the same order.
    """
    view = fk.exact_view((to_left(a) for a in arrivals), (to_right(z) for z in zones))
    return {car: _output(j) for car, j in view.items()}

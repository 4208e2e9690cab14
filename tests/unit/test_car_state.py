"""The car join's state layout (app/joins/car_state.py): its rows round-trip, and they are the
bytes the code wrote before the module existed — literal changelog rows of that code (its agents
driven as in tests/agent/test_agent_car_join.py), so existing changelogs and snapshots still
read, and a re-delivered record writes its row again byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from app.joins import car_state
from app.joins.car_state import CarPositions, ZoneCars, ZoneCarsTable, ZonePollution
from app.logic.car_join import CarArrival, CarPosition, ZoneReading
from app.state.ordered_keys import INT64_MAX, INT64_MIN, encode_zone_car
from app.state.overlay import MemoryIO, Overlay

P = 0  # the partition every row here lives in

#: (key, value) of changelog rows the code before app.joins.car_state wrote, per table
OLD_POSITIONS = [
    (b"9", b"[200,1,0.5,null]"),
    (b"9", b"[300,2,0.4,1]"),
    (b"1099511627776", b"[400,1125899906842624,1.0,null]"),
]
OLD_READINGS = [(b"1", b"[100,7.0]"), (b"3", b"[110,12.0]")]
ZONE_1_CAR_9 = b"\x80\x00\x00\x00\x00\x00\x00\x01\x80\x00\x00\x00\x00\x00\x00\t"
ZONE_2_CAR_9 = b"\x80\x00\x00\x00\x00\x00\x00\x02\x80\x00\x00\x00\x00\x00\x00\t"
ZONE_2_50_CAR_2_40 = b"\x80\x04\x00\x00\x00\x00\x00\x00\x80\x00\x01\x00\x00\x00\x00\x00"
OLD_ZONE_CARS = [
    (ZONE_1_CAR_9, b"[200,0.5]"),
    (ZONE_1_CAR_9, None),
    (ZONE_2_CAR_9, b"[300,0.4]"),
    (ZONE_2_50_CAR_2_40, b"[400,1.0]"),
]


def keyed() -> Overlay:
    """A batch's overlay of a table keyed by id (car-positions, zone-pollution)."""
    return Overlay(MemoryIO(bytes_keys=False))


def ordered() -> Overlay:
    """A batch's overlay of zone-cars (bytes keys, range scans)."""
    return Overlay(MemoryIO())


def logged(rows: Overlay) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of the changelog rows a batch's writes make, in order."""
    return [(key, value) for _, _, key, value in rows.flush()]


def stored(
    io: MemoryIO, rows: list[tuple[bytes, bytes | None]], key: Callable[[bytes], Any] | None = None
) -> None:
    """Changelog rows applied to a store, as recovery does (values decoded, tombstones
    deleted); keys of keyed tables decoded with ``key``."""
    io.write(
        P, [(key(k) if key else k, v, None if v is None else orjson.loads(v)) for k, v in rows]
    )


# --- the bytes of the code before this module -------------------------------------------------


def test_writes_make_the_old_changelog_rows():
    positions, pollution, cars = keyed(), keyed(), ordered()
    CarPositions(positions).put(P, CarPosition(CarArrival(9, 1, 0.5, 200)))
    ZonePollution(pollution).put(P, ZoneReading(1, 7.0, 100))
    ZonePollution(pollution).put(P, ZoneReading(3, 12.0, 110))
    ZoneCars(cars).put(P, 1, CarArrival(9, 1, 0.5, 200))
    assert logged(positions)[0] == OLD_POSITIONS[0]
    assert logged(pollution) == OLD_READINGS
    assert logged(cars) == OLD_ZONE_CARS[:1]
    # car 9 moves to zone 2; car 2**40 arrives in zone 2**50
    CarPositions(positions).put(P, CarPosition(CarArrival(9, 2, 0.4, 300), left_zone=1))
    CarPositions(positions).put(P, CarPosition(CarArrival(2**40, 2**50, 1.0, 400)))
    ZoneCars(cars).delete(P, 1, 9)
    ZoneCars(cars).put(P, 2, CarArrival(9, 2, 0.4, 300))
    ZoneCars(cars).put(P, 2**50, CarArrival(2**40, 2**50, 1.0, 400))
    assert logged(positions) == OLD_POSITIONS[1:]
    assert logged(cars) == OLD_ZONE_CARS[1:]


def test_the_old_rows_read_by_name():
    positions, pollution, cars = keyed(), keyed(), ordered()
    stored(positions.io, OLD_POSITIONS, key=int)
    stored(pollution.io, OLD_READINGS, key=int)
    stored(cars.io, OLD_ZONE_CARS)
    assert CarPositions(positions).get(P, 9) == CarPosition(CarArrival(9, 2, 0.4, 300), 1)
    assert CarPositions(positions).get(P, 2**40) == CarPosition(
        CarArrival(2**40, 2**50, 1.0, 400), None
    )
    assert CarPositions(positions).get(P, 7) is None
    assert ZonePollution(pollution).get(P, 3) == ZoneReading(3, 12.0, 110)
    assert ZonePollution(pollution).get(P, 2) is None
    assert ZoneCars(cars).get(P, 2, 9) == CarArrival(9, 2, 0.4, 300)
    assert ZoneCars(cars).get(P, 1, 9) is None  # its tombstone
    assert list(ZoneCars(cars).in_zone(P, 2)) == [CarArrival(9, 2, 0.4, 300)]
    assert list(ZoneCars(cars).in_zone(P, 2**50)) == [CarArrival(2**40, 2**50, 1.0, 400)]
    # the views read the tables' rows with the same functions
    assert car_state.position_of(9, orjson.loads(b"[300,2,0.4,1]")).arrival == CarArrival(
        9, 2, 0.4, 300
    )
    assert car_state.reading_of(1, orjson.loads(b"[100,7.0]")) == ZoneReading(1, 7.0, 100)


def test_a_row_read_and_written_again_is_the_same_bytes():
    """What a re-delivered record does (app.agents.car_join): its row again, unchanged — an
    integer fuel or pollution level of an older writer included."""
    old_positions = [(b"5", b"[10,3,1,null]"), *OLD_POSITIONS[1:]]
    old_readings = [(b"4", b"[20,3]"), *OLD_READINGS]
    old_cars = [(encode_zone_car(3, 5), b"[10,1]"), *OLD_ZONE_CARS[2:]]
    positions, pollution, cars = keyed(), keyed(), ordered()
    stored(positions.io, old_positions, key=int)
    stored(pollution.io, old_readings, key=int)
    stored(cars.io, old_cars)
    for key, _ in old_positions:
        rows = CarPositions(positions)
        rows.put(P, rows.get(P, int(key)))
    for key, _ in old_readings:
        readings = ZonePollution(pollution)
        readings.put(P, readings.get(P, int(key)))
    zone_cars = ZoneCars(cars)
    for zone, car in ((3, 5), (2, 9), (2**50, 2**40)):
        zone_cars.put(P, zone, zone_cars.get(P, zone, car))
    assert logged(positions) == old_positions
    assert logged(pollution) == old_readings
    assert logged(cars) == old_cars


# --- round trips --------------------------------------------------------------------------------

ids = st.integers(INT64_MIN, INT64_MAX)
times = st.integers(0, 2**53)
levels = st.floats(allow_nan=False, allow_infinity=False)


@given(car=ids, zone=ids, fuel=levels, t=times, left=st.none() | ids)
def test_a_position_round_trips(car, zone, fuel, t, left):
    pos = CarPosition(CarArrival(car, zone, fuel, t), left)
    assert car_state.position_of(car, car_state.position_row(pos)) == pos
    assert (
        car_state.position_of(car, orjson.loads(orjson.dumps(car_state.position_row(pos)))) == pos
    )


@given(zone=ids, level=levels, t=times)
def test_a_reading_round_trips(zone, level, t):
    reading = ZoneReading(zone, level, t)
    assert car_state.reading_of(zone, car_state.reading_row(reading)) == reading
    assert (
        car_state.reading_of(zone, orjson.loads(orjson.dumps(car_state.reading_row(reading))))
        == reading
    )


@given(cars=st.lists(st.tuples(ids, ids, levels, times), max_size=20), zone=ids)
def test_a_zone_s_cars_round_trip_and_are_one_key_range(cars, zone):
    rows = ZoneCars(ordered())
    for z, car, fuel, t in cars:
        rows.put(P, z, CarArrival(car, z, fuel, t))
    newest = {(z, car): CarArrival(car, z, fuel, t) for z, car, fuel, t in cars}
    for (z, car), arrival in newest.items():
        assert rows.get(P, z, car) == arrival
    for z in {zone, *(z for z, _ in newest)}:
        assert list(rows.in_zone(P, z)) == [a for (z2, _), a in sorted(newest.items()) if z2 == z]


def test_a_zone_s_cars_are_grouped_by_its_key_prefix():
    assert (
        ZoneCarsTable.group_key(encode_zone_car(7, 1))
        == ZoneCarsTable.group_key(encode_zone_car(7, INT64_MAX))
        != ZoneCarsTable.group_key(encode_zone_car(8, 1))
    )


def test_the_table_names_are_those_of_the_changelogs():
    assert (car_state.CAR_POSITIONS, car_state.ZONE_POLLUTION, car_state.ZONE_CARS) == (
        "car-positions",
        "zone-pollution",
        "zone-cars",
    )

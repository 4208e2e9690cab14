"""Pure car-join logic: scenarios in numbered steps, then a property over every interleaving.

The property drives both sides the way the workers do — car side per car, zone side per zone
partition, moves travelling through per-partition FIFO queues that are drained in any order —
and checks the consumer rule (newest output per car) against the brute-force answer.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedDict

from app.logic.car_join import (
    CarArrival,
    CarPollution,
    CarPosition,
    Move,
    ZoneReading,
    apply_add,
    apply_arrival,
    apply_del,
    apply_reading,
    exact_car_view,
    join,
    newest_per_car,
    output_order,
)
from app.state.ordered_keys import decode_zone_car, encode_zone_car, prefix_end, zone_prefix
from tests import oracle

LOGIC = Path(__file__).resolve().parents[2] / "app" / "logic"


@dataclass
class Cluster:
    """Both sides of the join in one process; moves wait in per-partition queues."""

    partitions: int = 2
    positions: dict[int, CarPosition] = field(default_factory=dict)
    readings: dict[int, ZoneReading] = field(default_factory=dict)
    zone_cars: SortedDict = field(default_factory=SortedDict)  # key (zone, car) -> arrival
    queues: dict[int, deque[Move]] = field(default_factory=dict)
    outputs: list[CarPollution] = field(default_factory=list)

    def arrive(self, a: CarArrival) -> None:
        new, moves = apply_arrival(self.positions.get(a.car_id), a)
        if new is not None:
            self.positions[a.car_id] = new
        for m in moves:
            self.queues.setdefault(m.zone_id % self.partitions, deque()).append(m)

    def read(self, z: ZoneReading) -> None:
        lo = zone_prefix(z.zone_id)
        cars = (
            self.zone_cars[k]
            for k in self.zone_cars.irange(lo, prefix_end(lo), inclusive=(True, False))
        )
        store, outs = apply_reading(self.readings.get(z.zone_id), z, cars)
        if store:
            self.readings[z.zone_id] = z
        self.outputs += outs

    def deliver(self, partition: int) -> None:
        m = self.queues[partition].popleft()
        key = encode_zone_car(m.zone_id, m.arrival.car_id)
        stored = self.zone_cars.get(key)
        if m.op == "DEL":
            if apply_del(stored, m):
                del self.zone_cars[key]
            return
        store, out = apply_add(stored, m, self.readings.get(m.zone_id))
        if store:
            self.zone_cars[key] = m.arrival
        if out is not None:
            self.outputs.append(out)

    def busy(self) -> list[int]:
        return sorted(p for p, q in self.queues.items() if q)

    def drain(self) -> None:
        while self.busy():
            self.deliver(self.busy()[0])

    def cars_of(self, zone: int) -> list[int]:
        return [decode_zone_car(k)[1] for k in self.zone_cars if decode_zone_car(k)[0] == zone]


def test_scenario_a_move_races_its_del_and_the_consumer_rule_picks_the_new_zone():
    c = Cluster(partitions=2)  # zone 1 -> partition 1, zone 2 -> partition 0
    # 1. zones 1 and 2 have readings; car 7 arrives in zone 1 at t=10
    c.read(ZoneReading(1, 30.0, 5))
    c.read(ZoneReading(2, 80.0, 6))
    c.arrive(CarArrival(7, 1, 0.9, 10))
    c.deliver(1)
    assert c.outputs == [CarPollution(7, 1, 0.9, 30.0, 10, 5)]
    # 2. car 7 moves to zone 2 at t=20: DEL to partition 1, ADD to partition 0
    c.arrive(CarArrival(7, 2, 0.8, 20))
    assert [(m.op, m.zone_id) for q in c.queues.values() for m in q] == [("DEL", 1), ("ADD", 2)]
    # 3. the ADD wins the race; zone 1 updates while the DEL is still in flight: stale output
    c.deliver(0)
    c.read(ZoneReading(1, 35.0, 25))
    assert c.outputs[-2:] == [
        CarPollution(7, 2, 0.8, 80.0, 20, 6),
        CarPollution(7, 1, 0.9, 35.0, 10, 25),
    ]
    # 4. the consumer keeps the greatest car_event_time: zone 2, whatever came last
    assert newest_per_car(c.outputs)[7].zone_id == 2
    # 5. the DEL lands: car 7 is gone from zone 1, its next update does not mention it
    c.deliver(1)
    assert c.cars_of(1) == [] and c.cars_of(2) == [7]
    before = len(c.outputs)
    c.read(ZoneReading(1, 40.0, 30))
    assert len(c.outputs) == before


def test_scenario_an_old_arrival_arriving_late_does_not_move_the_car_back():
    c = Cluster()
    # 1. newest first: car 3 in zone 2 at t=50
    c.arrive(CarArrival(3, 2, 0.5, 50))
    c.drain()
    # 2. an arrival in zone 1 at t=40 shows up afterwards: no move, no output
    c.arrive(CarArrival(3, 1, 0.7, 40))
    assert c.busy() == [] and c.positions[3].arrival.to_zone_id == 2
    c.drain()
    assert [o.zone_id for o in c.outputs] == [2] and c.cars_of(1) == []


def test_scenario_same_zone_arrival_updates_without_del_and_readings_reach_the_zone_only():
    c = Cluster(partitions=1)
    c.arrive(CarArrival(1, 4, 1.0, 10))
    c.arrive(CarArrival(2, 5, 1.0, 10))
    c.arrive(CarArrival(1, 4, 0.6, 20))  # same zone, newer: ADD only, fuel updated
    assert [m.op for m in c.queues[0]] == ["ADD", "ADD", "ADD"]
    c.drain()
    c.read(ZoneReading(4, 12.5, 15))
    assert c.outputs[-1:] == [CarPollution(1, 4, 0.6, 12.5, 20, 15)]  # car 2 (zone 5) not hit
    c.read(ZoneReading(4, 99.0, 1))  # an older reading changes nothing
    assert len(c.outputs) == 4


def test_redelivery_repeats_the_same_moves_and_outputs():
    pos, moves = apply_arrival(None, CarArrival(1, 1, 0.5, 10))
    pos, moves = apply_arrival(pos, CarArrival(1, 2, 0.4, 20))
    assert [(m.op, m.zone_id) for m in moves] == [("DEL", 1), ("ADD", 2)]
    again, moves_again = apply_arrival(pos, CarArrival(1, 2, 0.4, 20))
    assert again is None and moves_again == moves  # nothing to store, the same moves re-sent
    reading = ZoneReading(2, 3.0, 1)
    assert apply_reading(reading, reading, [moves[1].arrival]) == (
        False,
        [join(moves[1].arrival, reading)],
    )
    add = moves[1]
    assert apply_add(add.arrival, add, None) == (False, join(add.arrival, None))


def test_a_redelivered_del_never_removes_a_newer_add():
    newer = CarArrival(1, 1, 0.5, 30)
    old_del = Move("DEL", 1, CarArrival(1, 2, 0.5, 20))
    assert not apply_del(newer, old_del)
    assert apply_del(CarArrival(1, 1, 0.5, 10), old_del)
    assert not apply_del(None, old_del)


def test_ties_are_broken_by_zone_then_fuel_and_the_consumer_order_agrees():
    a = CarArrival(1, 3, 0.2, 10)
    b = CarArrival(1, 4, 0.1, 10)  # same time, greater zone: wins
    view = exact_car_view([b, a], [])
    assert view[1].zone_id == 4
    pos, _ = apply_arrival(None, a)
    _, moves = apply_arrival(pos, b)
    assert [m.op for m in moves] == ["DEL", "ADD"]
    assert output_order(join(b, None)) > output_order(join(a, ZoneReading(3, 1.0, 99)))
    # no reading sorts below any reading, an older reading below a newer one
    assert (
        output_order(join(a, None))
        < output_order(join(a, ZoneReading(3, 0.0, 0)))
        < output_order(join(a, ZoneReading(3, 0.0, 1)))
    )


def test_exact_view_joins_the_newest_reading_and_null_when_unknown():
    arrivals = [CarArrival(1, 1, 0.5, 10), CarArrival(1, 2, 0.6, 5), CarArrival(2, 9, 0.1, 1)]
    zones = [ZoneReading(1, 10.0, 100), ZoneReading(1, 20.0, 50), ZoneReading(1, 5.0, 100)]
    assert exact_car_view(arrivals, zones) == {
        1: CarPollution(1, 1, 0.5, 10.0, 10, 100),  # tie at t=100: greater level
        2: CarPollution(2, 9, 0.1, None, 1, None),
    }


def test_wire_forms_round_trip():
    out = CarPollution(1, 2, 0.5, None, 10, None)
    assert CarPollution.from_wire(out.to_wire()) == out
    assert set(out.to_wire()) == {
        "car_id",
        "zone_id",
        "fuel_level",
        "pollution_level",
        "car_event_time",
        "zone_event_time",
    }
    pos = CarPosition(CarArrival(4, 2, 0.5, 10), left_zone=1)  # its row: test_car_state.py
    assert Move("DEL", 1, pos.arrival).to_wire() == {
        "op": "DEL",
        "zone_id": 1,
        "car_id": 4,
        "to_zone_id": 2,
        "fuel_level": 0.5,
        "event_time": 10,
    }


def test_the_rules_import_neither_faust_nor_the_rest_of_app():
    """app/logic is pure: the batch twin and the property tests run it with no worker, and
    how its values are stored is app.joins.car_state's (or app.joins.state's) business."""
    offenders = []
    for path in sorted(LOGIC.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            mods = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [
                f"{path.name}: {m}"
                for m in mods
                if m.split(".")[0] in ("faust", "aiokafka", "mode")
                or (m.startswith("app") and not m.startswith("app.logic"))
            ]
    assert offenders == []


# --- property: any arrival order, any interleaving of zone partitions, duplicates included ---

arrivals = st.builds(
    CarArrival,
    car_id=st.integers(0, 5),
    to_zone_id=st.integers(0, 4),
    fuel_level=st.sampled_from([0.1, 0.5, 0.9]),
    event_time=st.integers(0, 12),
)
readings = st.builds(
    ZoneReading,
    zone_id=st.integers(0, 4),
    pollution_level=st.sampled_from([1.0, 2.0, 3.0]),
    event_time=st.integers(0, 12),
)
inputs = st.lists(st.one_of(arrivals, readings), max_size=40)


@settings(max_examples=400, deadline=None)
@given(inputs, st.integers(1, 3), st.data())
def test_newest_output_per_car_equals_the_exact_answer_for_any_interleaving(records, parts, data):
    order = data.draw(
        st.permutations(
            records + data.draw(st.lists(st.sampled_from(records)) if records else st.just([]))
        )
    )
    c = Cluster(partitions=parts)
    pending = deque(order)  # the inputs, duplicates included, in arrival order
    while pending or c.busy():
        choices = (["input"] if pending else []) + c.busy()
        step = data.draw(st.sampled_from(choices))
        if step == "input":
            rec = pending.popleft()
            c.arrive(rec) if isinstance(rec, CarArrival) else c.read(rec)
        else:
            c.deliver(step)

    cars = [r for r in records if isinstance(r, CarArrival)]
    zones = [r for r in records if isinstance(r, ZoneReading)]
    expected = exact_car_view(cars, zones)
    assert newest_per_car(c.outputs) == expected
    # the zone side ends with exactly one (zone, car) key per car: its newest zone
    assert sorted(decode_zone_car(k) for k in c.zone_cars) == sorted(
        (o.zone_id, car) for car, o in expected.items()
    )
    # the independent oracle (tests/oracle.py, what the image tier checks containers against)
    # says the same, on the wire
    assert oracle.exact_car_view([asdict(a) for a in cars], [asdict(z) for z in zones]) == {
        car: oracle.car_answer(o.to_wire()) for car, o in expected.items()
    }
    assert oracle.newest_car_outputs(o.to_wire() for o in c.outputs) == {
        car: oracle.car_answer(o.to_wire()) for car, o in expected.items()
    }

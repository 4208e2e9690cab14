"""Agents: car positions x zone pollution, a one-to-many join (docs/joins/car-zone.md).

etj-car-arrivals (key car id) -> ``track_cars`` -> table car-positions -> car moves
    (internal, key zone id: DEL old zone, ADD new zone)
etj-zones + car moves + car ticks (key zone id, co-partitioned) -> ``join_zone_pollution`` -> tables
    zone-pollution, zone-cars ((zone_id, car_id) keys) -> etj-car-pollution (key car id)

The zone side reads both of its inputs in ONE agent, so per worker one sequential loop owns a
zone's reading and its cars. A reading finds the zone's cars by a range scan over the zone-cars
store (:mod:`app.state.range_scan`): its cost depends on the zone's size, not on the table's.

The rules live in :mod:`app.logic.car_join`, the tables' keys and rows in
:mod:`app.joins.car_state`; this module loads/stores state through it and returns what the rules
emit. Both agents run the durability protocol of every agent (:mod:`app.loop.durable`):
per batch, the changelog is flushed, then the outputs are sent, then the records acked; a crash
in between loses outputs whose input is then re-consumed, and the rules answer a re-delivered
record (equal to the stored one) with its outputs again, and the agents write its row again:
after a kill -9 a worker that kept its RocksDB holds rows whose changelog rows were lost with
the process, and the next owner of the partition, which recovers from the changelog, would lack
them (a DEL whose tombstone was lost: the car would stay in the zone it left). The zone side's two inputs pass the
same event-time flow control as a join's (under a backlog, zone readings and car moves of a
partition are handled in event-time order); its ticks topic only wakes that flow control up.

Outputs of one car come from different zone partitions (DEL and ADD race), so they can reach
etj-car-pollution in any order: a consumer keeps the greatest per car by
:func:`app.logic.car_join.output_order` (car_event_time first), see
docs/joins/car-zone.md#the-consumer-rule-keep-the-newest-output-per-car.

Nothing is "too late" here (no etj-late records): the join keeps *current* state per car and per
zone, never purged by event time, so a record of any age is compared with that state and either
wins (it is the newest) or changes nothing. Refusing old records would make the answer depend on
arrival order (a zone whose only reading is old would lose it). Malformed records -> dead letters.
"""

from __future__ import annotations

from typing import Any

import orjson

from app import metrics, topology
from app.loop.acks import dead_letter
from app.loop.durable import DurableLoop, agent_body
from app.loop.types import Out
from app.compat.stores import StoreIO
from app.faust_app import app, settings
from app.joins.car_state import CarPositions, ZoneCars, ZonePollution
from app.logic.car_join import (
    CarArrival,
    CarPollution,
    Move,
    ZoneReading,
    apply_add,
    apply_arrival,
    apply_del,
    apply_reading,
)
from app.state.overlay import Overlay
from app.inputs.records import CarArrivalIn, CarMoveIn, InvalidRecord, ZoneIn, compile_parser

#: the car join's topics and tables (app.main imports this module only when the worker runs it)
CARS = topology.cars
if CARS is None:
    raise ImportError(f"{__name__} imported on a worker that does not run the car join "
                      "(ETJ_BUILTIN_JOINS)")

JOIN = "cars"  # the car join's value of the metrics' ``join`` label
DEAD_LETTERS = settings.dead_letter_topic
_COUNTERS = {**{op: metrics.car_moves.labels(op) for op in ("ADD", "DEL")},
             **{c: metrics.car_outputs.labels(c) for c in ("zone-update", "car-move")}}
#: moves by op and outputs by cause of the batch being handled (counted once per batch)
_counts: dict[str, int] = {}


def _count(what: str) -> None:
    _counts[what] = _counts.get(what, 0) + 1


def count_batch() -> None:
    """The batch's moves and outputs to their counters: once per batch, not under a lock per
    record."""
    for what, n in _counts.items():
        _COUNTERS[what].inc(n)
    _counts.clear()


def move_out(move: Move) -> Out:
    _count(move.op)
    return Out(settings.car_moves_topic, str(move.zone_id).encode(),
               orjson.dumps(move.to_wire()))


def output_out(out: CarPollution, cause: str) -> Out:
    _count(cause)
    return Out(settings.car_pollution_topic, str(out.car_id).encode(),
               orjson.dumps(out.to_wire()))


_PARSERS = {settings.car_arrivals_topic: compile_parser(CarArrivalIn),
            settings.zones_topic: compile_parser(ZoneIn),
            settings.car_moves_topic: compile_parser(CarMoveIn)}


def parse_input(topic: str, key: bytes | None, value: bytes | None,
                timestamp: int | None = None) -> tuple[Any, int]:
    """(the validated record, its event time); raises :class:`InvalidRecord`. (``timestamp``,
    the Kafka timestamp the loop passes every engine, is not one of the car join's inputs.)"""
    rec = _PARSERS[topic](key, value)
    return rec, rec.event_time


def _dead(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
          error: InvalidRecord) -> list[Out]:
    return [dead_letter(JOIN, DEAD_LETTERS, topic, partition, offset, key, value, str(error))]


# --- car side ---------------------------------------------------------------------------------

class CarSide:
    """etj-car-arrivals -> car-positions -> car moves (DEL old zone, ADD new zone)."""

    join = JOIN

    def __init__(self) -> None:
        self.positions = CarPositions(Overlay(StoreIO(CARS.positions)))
        self.overlays = (self.positions.rows,)
        self.parse = parse_input

    def on_record(self, topic: str, partition: int, offset: int, key: bytes | None,
                  value: bytes | None, rec: Any) -> list[Out]:
        if isinstance(rec, InvalidRecord):
            return _dead(topic, partition, offset, key, value, rec)
        return self.on_arrival(partition, rec)

    def on_arrival(self, partition: int, rec: Any) -> list[Out]:
        """One car arrival: update the position, return the moves to send."""
        position = self.positions.get(partition, rec.car_id)
        new, moves = apply_arrival(position, CarArrival(rec.car_id, rec.to_zone_id,
                                                        rec.fuel_level, rec.event_time))
        if new is not None:
            self.positions.put(partition, new)
        elif moves and position is not None:  # equal to it: re-delivered, its row again
            self.positions.put(partition, position)  # (module docstring)
        return [move_out(m) for m in moves]

    def on_tick(self, partition: int, offset: int) -> list[Out]:
        return []

    def end_batch(self) -> None:
        count_batch()


car_side = CarSide()
track_loop = DurableLoop(car_side, (settings.car_arrivals_topic,))
app.topics.add(CARS.arrivals)  # subscribed though the stream is never iterated
track_cars = app.agent(CARS.arrivals, name=f"{__name__}.track_cars")(agent_body(track_loop))
track_cars.__doc__ = "Keep each car's newest position; send DEL/ADD to the zones it leaves/enters."


# --- zone side --------------------------------------------------------------------------------


class ZoneSide:
    """etj-zones + car moves (+ ticks) -> zone-pollution, zone-cars -> etj-car-pollution."""

    join = JOIN

    def __init__(self) -> None:
        self.pollution = ZonePollution(Overlay(StoreIO(CARS.pollution)))
        self.cars = ZoneCars(Overlay(StoreIO(CARS.zone_cars)))
        self.overlays = (self.pollution.rows, self.cars.rows)
        self.parse = parse_input

    def on_record(self, topic: str, partition: int, offset: int, key: bytes | None,
                  value: bytes | None, rec: Any) -> list[Out]:
        if isinstance(rec, InvalidRecord):
            return _dead(topic, partition, offset, key, value, rec)
        if topic == settings.zones_topic:
            return self.on_reading(rec, partition)
        return self.on_move(rec, partition)

    def on_tick(self, partition: int, offset: int) -> list[Out]:
        return []  # the ticks topic is only read (revisit ticks: nothing to revisit here)

    def end_batch(self) -> None:
        count_batch()

    def on_reading(self, rec: Any, partition: int) -> list[Out]:
        """A zone's pollution reading: if newest, store it and re-join every car of the zone."""
        stored = self.pollution.get(partition, rec.zone_id)
        reading = ZoneReading(rec.zone_id, rec.pollution_level, rec.event_time)
        store, outputs = apply_reading(stored, reading,
                                       self.cars.in_zone(partition, rec.zone_id))
        if store:
            self.pollution.put(partition, reading)
        elif stored == reading:  # re-delivered: its row again (module docstring)
            self.pollution.put(partition, stored)
        return [output_out(o, "zone-update") for o in outputs]

    def on_move(self, rec: Any, partition: int) -> list[Out]:
        """ADD: store the car under (zone, car) and join it; DEL: remove that key."""
        move = Move(rec.op, rec.zone_id,
                    CarArrival(rec.car_id, rec.to_zone_id, rec.fuel_level, rec.event_time))
        stored = self.cars.get(partition, rec.zone_id, rec.car_id)
        if rec.op == "DEL":
            if apply_del(stored, move) or stored is None:  # deleted, or its tombstone again
                self.cars.delete(partition, rec.zone_id, rec.car_id)
            return []
        store, output = apply_add(stored, move, self.pollution.get(partition, rec.zone_id))
        if store:
            self.cars.put(partition, rec.zone_id, move.arrival)
        elif stored == move.arrival:  # re-delivered: its row again (module docstring)
            self.cars.put(partition, rec.zone_id, stored)
        return [] if output is None else [output_out(output, "car-move")]


zone_side = ZoneSide()
#: flow control: zone readings, then moves (ties go to the reading)
zone_loop = DurableLoop(zone_side, (settings.zones_topic, settings.car_moves_topic,
                                    settings.car_ticks_topic),
                        merged=(settings.zones_topic, settings.car_moves_topic),
                        ticks=settings.car_ticks_topic)
app.topics.add(CARS.zone_inputs)  # subscribed though the stream is never iterated
join_zone_pollution = app.agent(CARS.zone_inputs,
                                name=f"{__name__}.join_zone_pollution")(agent_body(zone_loop))

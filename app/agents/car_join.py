"""Agents: car positions x zone pollution, a one-to-many join (docs/joins/car-zone.md).

etj-car-arrivals (key car id) -> ``track_cars`` -> table car-positions -> car moves
    (internal, key zone id: DEL old zone, ADD new zone)
etj-zones + car moves + car ticks (key zone id, co-partitioned) -> ``join_zone_pollution`` -> tables
    zone-pollution, zone-cars ((zone_id, car_id) keys) -> etj-car-pollution (key car id)

The zone side reads both of its inputs in ONE agent, so per worker one sequential loop owns a
zone's reading and its cars. A reading finds the zone's cars by a range scan over the zone-cars
store (:mod:`app.range_scan`): its cost depends on the zone's size, not on the table's.

The rules live in :mod:`app.logic.car_join`; this module loads/stores state and returns what
they emit. Both agents run the durability protocol of every agent (:mod:`app.agents.durable`):
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

import orjson
from typing import Any, Iterator

from app import metrics
from app.agents.durable import DurableLoop, Out, dead_letter
from app.faust_app import app, settings
from app.keys import decode_zone_car, encode_zone_car, zone_prefix
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
)
from app.range_scan import scan_prefix
from app.records import CarArrivalIn, CarMoveIn, InvalidRecord, ZoneIn, parse
from app.topology import (car_arrivals, car_moves, car_pollution, car_pollution_inputs,
                          car_positions, car_ticks, zone_cars, zone_pollution)

JOIN = "cars"  # the car join's value of the metrics' ``join`` label


def move_out(move: Move) -> Out:
    metrics.car_moves.labels(move.op).inc()
    return Out(car_moves, str(move.zone_id).encode(), orjson.dumps(move.to_wire()))


def output_out(out: CarPollution, cause: str) -> Out:
    metrics.car_outputs.labels(cause).inc()
    return Out(car_pollution, str(out.car_id).encode(), orjson.dumps(out.to_wire()))


def _dead(msg: Any, error: InvalidRecord) -> list[Out]:
    return [dead_letter(JOIN, msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                        str(error))]


# --- car side ---------------------------------------------------------------------------------

_MODELS = {settings.car_arrivals_topic: CarArrivalIn, settings.zones_topic: ZoneIn,
           settings.car_moves_topic: CarMoveIn}


def parse_input(topic: str, key: bytes | None, value: bytes | None) -> tuple[Any, int]:
    """(the validated record, its event time); raises :class:`InvalidRecord`."""
    rec = parse(_MODELS[topic], key, value)
    return rec, rec.event_time


def on_arrival(rec: CarArrivalIn) -> list[Out]:
    """One car arrival: update the position, return the moves to send."""
    raw = car_positions.get(rec.car_id)
    position = None if raw is None else CarPosition.from_json(rec.car_id, raw)
    new, moves = apply_arrival(position, CarArrival(rec.car_id, rec.to_zone_id,
                                                    rec.fuel_level, rec.event_time))
    if new is not None:
        car_positions[rec.car_id] = new.to_json()
    elif moves:  # equal to the position: re-delivered, its row again (module docstring)
        car_positions[rec.car_id] = raw
    return [move_out(m) for m in moves]


def handle_arrival(msg: Any, rec: Any) -> list[Out]:
    return _dead(msg, rec) if isinstance(rec, InvalidRecord) else on_arrival(rec)


track_loop = DurableLoop(JOIN, (settings.car_arrivals_topic,), None, parse_input, handle_arrival,
                         tables=(car_positions,))


@app.agent(car_arrivals)
async def track_cars(stream: Any) -> None:
    """Keep each car's newest position; send DEL/ADD to the zones it leaves/enters."""
    await track_loop.run(stream)


# --- zone side --------------------------------------------------------------------------------


def cars_in_zone(table: Any, zone_id: int, partition: int) -> Iterator[CarArrival]:
    """The cars of one zone, by a range scan over its (zone_id, ·) keys of ``table``
    (zone-cars; a parameter so that bench/zone_fanout.py times this very code)."""
    for key, (event_time, fuel_level) in scan_prefix(table, zone_prefix(zone_id), partition):
        _, car_id = decode_zone_car(key)
        yield CarArrival(car_id, zone_id, fuel_level, event_time)


def on_reading(rec: ZoneIn, partition: int) -> list[Out]:
    """A zone's pollution reading: if newest, store it and re-join every car of the zone."""
    raw = zone_pollution.get(rec.zone_id)
    stored = None if raw is None else ZoneReading(rec.zone_id, raw[1], raw[0])
    reading = ZoneReading(rec.zone_id, rec.pollution_level, rec.event_time)
    store, outputs = apply_reading(stored, reading, cars_in_zone(zone_cars, rec.zone_id,
                                                                 partition))
    if store:
        zone_pollution[rec.zone_id] = [reading.event_time, reading.pollution_level]
    elif stored == reading:  # re-delivered: its row again (module docstring)
        zone_pollution[rec.zone_id] = raw
    return [output_out(o, "zone-update") for o in outputs]


def on_move(rec: CarMoveIn) -> list[Out]:
    """ADD: store the car under (zone, car) and join it; DEL: remove that key."""
    move = Move(rec.op, rec.zone_id,
                CarArrival(rec.car_id, rec.to_zone_id, rec.fuel_level, rec.event_time))
    table_key = encode_zone_car(rec.zone_id, rec.car_id)
    raw = zone_cars.get(table_key)
    stored = None if raw is None else CarArrival(rec.car_id, rec.zone_id, raw[1], raw[0])
    if rec.op == "DEL":
        if apply_del(stored, move):
            del zone_cars[table_key]
        elif stored is None:  # deleted already (re-delivered?): its tombstone again
            zone_cars.on_key_del(table_key)  # the changelog hook alone: no row to delete
        return []
    raw_reading = zone_pollution.get(rec.zone_id)
    reading = (None if raw_reading is None
               else ZoneReading(rec.zone_id, raw_reading[1], raw_reading[0]))
    store, output = apply_add(stored, move, reading)
    if store:
        zone_cars[table_key] = [rec.event_time, rec.fuel_level]
    elif stored == move.arrival:  # re-delivered: its row again (module docstring)
        zone_cars[table_key] = raw
    return [] if output is None else [output_out(output, "car-move")]


def handle_zone_side(msg: Any, rec: Any) -> list[Out]:
    if msg.topic == settings.car_ticks_topic:
        return []  # a wake-up: the loop has let go of what waited too long
    if isinstance(rec, InvalidRecord):
        return _dead(msg, rec)
    return on_reading(rec, msg.partition) if msg.topic == settings.zones_topic else on_move(rec)


#: flow control: zone readings, then moves (ties go to the reading)
zone_loop = DurableLoop(JOIN, (settings.zones_topic, settings.car_moves_topic), car_ticks,
                        parse_input, handle_zone_side, tables=(zone_pollution, zone_cars))


@app.agent(car_pollution_inputs)
async def join_zone_pollution(stream: Any) -> None:
    """Join zone readings with the cars in the zone; apply DEL/ADD moves as they arrive."""
    await zone_loop.run(stream)

"""Agents: car positions x zone pollution, a one-to-many join (DESIGN §2).

etj-car-arrivals (key car id) -> ``track_cars`` -> table car-positions -> car moves
    (internal, key zone id: DEL old zone, ADD new zone)
etj-zones + car moves (key zone id, co-partitioned) -> ``join_zone_pollution`` -> tables
    zone-pollution, zone-cars ((zone_id, car_id) keys) -> etj-car-pollution (key car id)

The zone side reads both of its inputs in ONE agent, so per worker one sequential loop owns a
zone's reading and its cars. A reading finds the zone's cars by a range scan over the zone-cars
store (:mod:`app.range_scan`): its cost depends on the zone's size, not on the table's.

The rules live in :mod:`app.logic.car_join`; this module loads/stores state and sends what they
return. Crash safety, as in the mood agent: state (changelogs) is flushed before the outputs it
implies are sent, and the outputs are flushed before the next event, so an acknowledged offset
never has unsent outputs. A crash in between loses outputs whose input is then re-consumed; the
rules answer a re-delivered record (equal to the stored one) with its outputs again.

Outputs of one car come from different zone partitions (DEL and ADD race), so they can reach
etj-car-pollution in any order: a consumer keeps the greatest per car by
:func:`app.logic.car_join.output_order` (car_event_time first), see the README ("Car positions × zone pollution").

Nothing is "too late" here (no etj-late records): the join keeps *current* state per car and per
zone, never purged by event time, so a record of any age is compared with that state and either
wins (it is the newest) or changes nothing. Refusing old records would make the answer depend on
arrival order (a zone whose only reading is old would lose it). Malformed records -> dead letters.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Iterator

from faust.types import TopicT

from app import metrics, sinks
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
from app.tables import car_positions, zone_cars, zone_pollution
from app.topics import (
    car_arrivals,
    car_moves,
    car_pollution,
    car_pollution_inputs,
    dead_letters,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Out:
    """A record to send once state is durable."""

    topic: TopicT
    key: bytes | None
    value: bytes


def dead(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
         error: str) -> Out:
    metrics.dead_letters.labels(topic).inc()
    return Out(dead_letters, key, sinks.dead_letter(topic, partition, offset, key, value, error))


def move_out(move: Move) -> Out:
    metrics.car_moves.labels(move.op).inc()
    return Out(car_moves, str(move.zone_id).encode(), json.dumps(move.to_wire()).encode())


def output_out(out: CarPollution, cause: str) -> Out:
    metrics.car_outputs.labels(cause).inc()
    return Out(car_pollution, str(out.car_id).encode(), json.dumps(out.to_wire()).encode())


async def send_all(outs: list[Out]) -> None:
    if outs:
        await app.producer.flush()  # state first: outputs never outrun their changelog
        for out in outs:
            await out.topic.send(key=out.key, value=out.value, force=True)
        await app.producer.flush()  # outputs durable before this offset can be committed


# --- car side ---------------------------------------------------------------------------------


def on_arrival(topic: str, partition: int, offset: int, key: bytes | None,
               value: bytes | None) -> list[Out]:
    """One car arrival: validate, update the position, return the moves to send."""
    try:
        rec = parse(CarArrivalIn, key, value)
    except InvalidRecord as exc:
        return [dead(topic, partition, offset, key, value, str(exc))]
    raw = car_positions.get(rec.car_id)
    position = None if raw is None else CarPosition.from_json(rec.car_id, raw)
    new, moves = apply_arrival(position, CarArrival(rec.car_id, rec.to_zone_id,
                                                    rec.fuel_level, rec.event_time))
    if new is not None:
        car_positions[rec.car_id] = new.to_json()
    return [move_out(m) for m in moves]


@app.agent(car_arrivals)
async def track_cars(stream: Any) -> None:
    """Keep each car's newest position; send DEL/ADD to the zones it leaves/enters."""
    async for event in stream.events():
        msg = event.message
        metrics.records_in.labels(msg.topic).inc()
        try:
            outs = on_arrival(msg.topic, msg.partition, msg.offset, msg.key, msg.value)
        except Exception as exc:  # a bug must not kill the worker nor lose the record
            log.exception("failed on %s[%s]@%s", msg.topic, msg.partition, msg.offset)
            outs = [dead(msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                         f"internal error: {exc!r}")]
        await send_all(outs)


# --- zone side --------------------------------------------------------------------------------


def cars_in_zone(table: Any, zone_id: int, partition: int) -> Iterator[CarArrival]:
    """The cars of one zone, by a range scan over its (zone_id, ·) keys of ``table``
    (zone-cars; a parameter so that bench/zone_fanout.py times this very code)."""
    for key, (event_time, fuel_level) in scan_prefix(table, zone_prefix(zone_id), partition):
        _, car_id = decode_zone_car(key)
        yield CarArrival(car_id, zone_id, fuel_level, event_time)


def on_reading(topic: str, partition: int, offset: int, key: bytes | None,
               value: bytes | None) -> list[Out]:
    """A zone's pollution reading: if newest, store it and re-join every car of the zone."""
    try:
        rec = parse(ZoneIn, key, value)
    except InvalidRecord as exc:
        return [dead(topic, partition, offset, key, value, str(exc))]
    raw = zone_pollution.get(rec.zone_id)
    stored = None if raw is None else ZoneReading(rec.zone_id, raw[1], raw[0])
    reading = ZoneReading(rec.zone_id, rec.pollution_level, rec.event_time)
    store, outputs = apply_reading(stored, reading, cars_in_zone(zone_cars, rec.zone_id,
                                                                 partition))
    if store:
        zone_pollution[rec.zone_id] = [reading.event_time, reading.pollution_level]
    return [output_out(o, "zone-update") for o in outputs]


def on_move(topic: str, partition: int, offset: int, key: bytes | None,
            value: bytes | None) -> list[Out]:
    """ADD: store the car under (zone, car) and join it; DEL: remove that key."""
    try:
        rec = parse(CarMoveIn, key, value)
    except InvalidRecord as exc:
        return [dead(topic, partition, offset, key, value, str(exc))]
    move = Move(rec.op, rec.zone_id,
                CarArrival(rec.car_id, rec.to_zone_id, rec.fuel_level, rec.event_time))
    table_key = encode_zone_car(rec.zone_id, rec.car_id)
    raw = zone_cars.get(table_key)
    stored = None if raw is None else CarArrival(rec.car_id, rec.zone_id, raw[1], raw[0])
    if rec.op == "DEL":
        if apply_del(stored, move):
            del zone_cars[table_key]
        return []
    raw_reading = zone_pollution.get(rec.zone_id)
    reading = (None if raw_reading is None
               else ZoneReading(rec.zone_id, raw_reading[1], raw_reading[0]))
    store, output = apply_add(stored, move, reading)
    if store:
        zone_cars[table_key] = [rec.event_time, rec.fuel_level]
    return [] if output is None else [output_out(output, "car-move")]


@app.agent(car_pollution_inputs)
async def join_zone_pollution(stream: Any) -> None:
    """Join zone readings with the cars in the zone; apply DEL/ADD moves as they arrive."""
    async for event in stream.events():
        msg = event.message
        metrics.records_in.labels(msg.topic).inc()
        handle = on_reading if msg.topic == settings.zones_topic else on_move
        try:
            outs = handle(msg.topic, msg.partition, msg.offset, msg.key, msg.value)
        except Exception as exc:  # a bug must not kill the worker nor lose the record
            log.exception("failed on %s[%s]@%s", msg.topic, msg.partition, msg.offset)
            outs = [dead(msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                         f"internal error: {exc!r}")]
        await send_all(outs)

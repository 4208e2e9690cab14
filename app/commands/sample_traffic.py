"""Tools: ``faust -A app.main sample-traffic`` (out-of-order inputs of both joins), ``watch``
(mood revisions, or any join's output with ``--join``) and ``watch-cars`` (the car view).

The generators are pure functions of a seed so tests replay exactly the scenario a user sees.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Iterator

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from faust.cli import option

from app.faust_app import app, settings
from app.kafka.connection import bootstrap_servers
from app.kafka.security import aiokafka_auth

CONSULTANTS = ("alice", "bob", "carol", "dave", "erin", "frank")
MOODS = ("happy", "sad", "tired", "excited", "bored", "focused")
PRODUCTS = ("laptop", "phone", "bike", "coffee", "book", "kayak", "tent", "piano")

#: (input kind "mood" | "event" | "car" | "zone", key, value), in arrival order
Record = tuple[str, str, dict]


def sample_moods_and_events(
    seed: int,
    count: int,
    start_ms: int,
    step_ms: int = 1000,
    disorder_ms: int = 3000,
    late_ratio: float = 0.1,
    late_delay_ms: int = 20_000,
    mood_ratio: float = 0.3,
    consultants: tuple[str, ...] = CONSULTANTS,
) -> list[Record]:
    """``count`` records in *arrival* order: event times step forward, arrivals are jittered by up
    to ``disorder_ms`` and a ``late_ratio`` share of moods arrive ``late_delay_ms`` later still,
    which is what makes the worker emit corrections.
    """
    rng = random.Random(seed)
    timed: list[tuple[int, int, Record]] = []
    for i in range(count):
        t = start_ms + i * step_ms + rng.randrange(step_ms)
        who = rng.choice(consultants)
        arrival = t + rng.randrange(disorder_ms + 1)
        if rng.random() < mood_ratio:
            rec: Record = ("mood", who, {"name": who, "mood": rng.choice(MOODS), "event_time": t})
            if rng.random() < late_ratio:
                arrival += late_delay_ms
        else:
            rec = (
                "event",
                who,
                {
                    "consultant": who,
                    "recommendation": rng.choice(PRODUCTS),
                    "event_time": t,
                    "id": f"rec-{seed}-{i}",
                },
            )
        timed.append((arrival, i, rec))
    timed.sort()
    return [rec for _, _, rec in timed]


def sample_cars_and_zones(
    seed: int,
    count: int,
    start_ms: int,
    cars: int = 40,
    zones: int = 6,
    step_ms: int = 1000,
    disorder_ms: int = 3000,
    late_ratio: float = 0.1,
    late_delay_ms: int = 20_000,
    zone_ratio: float = 0.15,
    first_car: int = 1,
    first_zone: int = 1,
) -> list[Record]:
    """``count`` car arrivals and zone readings in *arrival* order (as
    :func:`sample_moods_and_events`): event times step forward, arrivals are jittered by up to
    ``disorder_ms``, and a ``late_ratio`` share of records arrive ``late_delay_ms`` later still —
    an old car arrival then shows up after newer ones (it must not move the car back), an old
    reading after newer ones of its zone. Car ids count from ``first_car``, zone ids from
    ``first_zone``.
    """
    rng = random.Random(seed)
    timed: list[tuple[int, int, Record]] = []
    for i in range(count):
        t = start_ms + i * step_ms + rng.randrange(step_ms)
        arrival = t + rng.randrange(disorder_ms + 1)
        if rng.random() < late_ratio:
            arrival += late_delay_ms
        if rng.random() < zone_ratio:
            zone = first_zone + rng.randrange(zones)
            rec: Record = (
                "zone",
                str(zone),
                {
                    "zone_id": zone,
                    "event_time": t,
                    "pollution_level": round(rng.uniform(0, 200), 1),
                },
            )
        else:
            car, zone = first_car + rng.randrange(cars), first_zone + rng.randrange(zones)
            rec = (
                "car",
                str(car),
                {
                    "car_id": car,
                    "to_zone_id": zone,
                    "event_time": t,
                    "fuel_level": round(rng.uniform(0, 1), 3),
                },
            )
        timed.append((arrival, i, rec))
    timed.sort()
    return [rec for _, _, rec in timed]


def endless(
    seed: int,
    chunk: int,
    disorder_ms: int,
    late_ratio: float,
    cars: int = 0,
    zones: int = 1,
    step_ms: int = 1000,
) -> Iterator[Record]:
    """Chunks of mood traffic, each followed by a chunk of car traffic when ``cars`` > 0.
    ``step_ms``: event time between one record of a join and its next; sent at that pace,
    event time keeps up with the wall clock (and never runs ahead of it: ETJ_MAX_FUTURE_MS)."""
    start = int(time.time() * 1000)
    n = 0
    while True:
        moods = sample_moods_and_events(
            seed + n,
            chunk,
            start + n * chunk * step_ms,
            step_ms,
            disorder_ms=disorder_ms,
            late_ratio=late_ratio,
        )
        if not cars:
            yield from moods
        else:
            car_traffic = sample_cars_and_zones(
                seed + n,
                chunk,
                start + n * chunk * step_ms,
                cars=cars,
                zones=zones,
                step_ms=step_ms,
                disorder_ms=disorder_ms,
                late_ratio=late_ratio,
            )
            for pair in zip(moods, car_traffic):  # same pace for both joins
                yield from pair
        n += 1


def topic_of(kind: str) -> str:
    return {
        "mood": settings.moods_topic,
        "event": settings.events_topic,
        "car": settings.car_arrivals_topic,
        "zone": settings.zones_topic,
    }[kind]


@app.command(
    option("--rate", type=float, default=4.0, help="Records per second."),
    option("--count", type=int, default=0, help="Records to send (0: until stopped)."),
    option("--disorder-ms", type=int, default=3000, help="Max arrival jitter (event time)."),
    option(
        "--late-ratio",
        type=float,
        default=0.15,
        help="Share of moods, car arrivals and zone readings that arrive late.",
    ),
    option("--cars", type=int, default=30, help="Cars of the car join (0: no car traffic)."),
    option("--zones", type=int, default=5, help="Zones the cars move between."),
    option("--seed", type=int, default=1, help="Random seed."),
)
async def sample_traffic(
    self: object,
    rate: float,
    count: int,
    disorder_ms: int,
    late_ratio: float,
    cars: int,
    zones: int,
    seed: int,
) -> None:
    """Produce out-of-order moods/recommendations and car arrivals/zone readings."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers(settings.broker_url), **aiokafka_auth(settings)
    )
    await producer.start()
    try:
        # each join gets rate/2 records a second with car traffic: event time steps as much
        step_ms = max(1, round(1000 * (2 if cars else 1) / rate))
        traffic = endless(
            seed, 200, disorder_ms, late_ratio, cars=cars, zones=max(zones, 1), step_ms=step_ms
        )
        for i, (kind, key, value) in enumerate(traffic):
            if count and i >= count:
                break
            await producer.send_and_wait(
                topic_of(kind), json.dumps(value).encode(), key=key.encode()
            )
            await asyncio.sleep(1 / rate)
    finally:
        await producer.stop()


#: the fields a ``watch --join`` line starts with, when the output has them
LEADING = ("id", "revision", "cause")


def revision_line(record: dict) -> str:
    """One output record of any join as one readable line: id, revision and cause first, then
    every other field as ``name=value`` in the record's order."""
    head = []
    if "id" in record:
        head.append(str(record["id"]))
    if "revision" in record:
        head.append(f"rev {record['revision']}")
    if "cause" in record:
        head.append(f"[{record['cause']}]")
    rest = [f"{k}={json.dumps(v)}" for k, v in record.items() if k not in LEADING]
    return " ".join(head + rest)


def mood_line(r: dict) -> str:
    """A mood revision as ``watch`` (without ``--join``) has always printed it."""
    what = (
        f"CORRECTION {r['previous_mood']} -> {r['mood']}"
        if r["revision"] > 1
        else f"joined mood={r['mood']}"
    )
    return (
        f"{r['consultant']:>6} {r['recommendation']:<8} t={r['event_time']} "
        f"rev {r['revision']} [{r['cause']}] {what}"
    )


@app.command(
    option("--from-beginning", is_flag=True, default=False, help="Replay the topic."),
    option(
        "--join",
        type=str,
        default=None,
        help="The join whose output to follow (default: the mood join's).",
    ),
)
async def watch(self: object, from_beginning: bool, join: str | None) -> None:
    """Print each revision of a join's output topic as one readable line."""
    from app.web.join_readers import output_topics

    line: Callable[[dict], str]
    if join is None:
        topic, line = settings.output_topic, mood_line
    else:
        topics = output_topics()
        if join not in topics:
            raise SystemExit(
                f"unknown join {join!r}: this configuration runs "
                f"{', '.join(sorted(topics)) or 'none'}"
            )
        topic, line = topics[join], revision_line
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap_servers(settings.broker_url),
        auto_offset_reset="earliest" if from_beginning else "latest",
        **aiokafka_auth(settings),
    )
    await consumer.start()
    try:
        async for msg in consumer:
            try:
                record = json.loads(msg.value)
                text = line(record)
            except (ValueError, TypeError, KeyError) as exc:  # shown, never fatal
                text = f"(unreadable record at {msg.partition}/{msg.offset}: {exc!r})"
            print(text, flush=True)
    finally:
        await consumer.stop()


@app.command(option("--from-beginning", is_flag=True, default=False, help="Replay the topic."))
async def watch_cars(self: object, from_beginning: bool) -> None:
    """Print the car view as it changes: per car, the newest output by the consumer rule."""
    from app.logic.car_join import CarPollution, output_order

    consumer = AIOKafkaConsumer(
        settings.car_pollution_topic,
        bootstrap_servers=bootstrap_servers(settings.broker_url),
        auto_offset_reset="earliest" if from_beginning else "latest",
        **aiokafka_auth(settings),
    )
    newest: dict[int, CarPollution] = {}
    await consumer.start()
    try:
        async for msg in consumer:
            out = CarPollution.from_wire(json.loads(msg.value))
            cur = newest.get(out.car_id)
            if cur is not None and output_order(out) < output_order(cur):
                print(
                    f"car {out.car_id:>4} (stale output from zone {out.zone_id} ignored)",
                    flush=True,
                )
                continue
            newest[out.car_id] = out
            print(
                f"car {out.car_id:>4} zone {out.zone_id:>3} fuel {out.fuel_level:<6} "
                f"pollution {out.pollution_level} (car t={out.car_event_time}, "
                f"zone t={out.zone_event_time})",
                flush=True,
            )
    finally:
        await consumer.stop()

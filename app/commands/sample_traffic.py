"""Tools: ``faust -A app.main sample-traffic`` (out-of-order inputs) and ``watch`` (revisions).

The generator is a pure function of a seed so tests replay exactly the scenario a user sees.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Iterator

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from faust.cli import option

from app.copartition import bootstrap_servers
from app.faust_app import app, settings

CONSULTANTS = ("alice", "bob", "carol", "dave", "erin", "frank")
MOODS = ("happy", "sad", "tired", "excited", "bored", "focused")
PRODUCTS = ("laptop", "phone", "bike", "coffee", "book", "kayak", "tent", "piano")

Record = tuple[str, str, dict]  # (input kind "mood" | "event", key, value), in arrival order


def sample_moods_and_events(seed: int, count: int, start_ms: int, step_ms: int = 1000,
                            disorder_ms: int = 3000, late_ratio: float = 0.1,
                            late_delay_ms: int = 20_000, mood_ratio: float = 0.3,
                            consultants: tuple[str, ...] = CONSULTANTS) -> list[Record]:
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
            rec = ("event", who, {"consultant": who, "recommendation": rng.choice(PRODUCTS),
                                  "event_time": t, "id": f"rec-{seed}-{i}"})
        timed.append((arrival, i, rec))
    timed.sort()
    return [rec for _, _, rec in timed]


def endless(seed: int, chunk: int, disorder_ms: int, late_ratio: float) -> Iterator[Record]:
    start = int(time.time() * 1000)
    n = 0
    while True:
        yield from sample_moods_and_events(seed + n, chunk, start + n * chunk * 1000,
                                           disorder_ms=disorder_ms, late_ratio=late_ratio)
        n += 1


@app.command(
    option("--rate", type=float, default=4.0, help="Records per second."),
    option("--count", type=int, default=0, help="Records to send (0: until stopped)."),
    option("--disorder-ms", type=int, default=3000, help="Max arrival jitter (event time)."),
    option("--late-ratio", type=float, default=0.15, help="Share of moods that arrive late."),
    option("--seed", type=int, default=1, help="Random seed."),
)
async def sample_traffic(self: object, rate: float, count: int, disorder_ms: int,
                         late_ratio: float, seed: int) -> None:
    """Produce out-of-order moods and recommendations at a readable pace."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers(settings.broker_url))
    await producer.start()
    topics = {"mood": settings.moods_topic, "event": settings.events_topic}
    try:
        for i, (kind, key, value) in enumerate(endless(seed, 200, disorder_ms, late_ratio)):
            if count and i >= count:
                break
            await producer.send_and_wait(topics[kind], json.dumps(value).encode(), key=key.encode())
            await asyncio.sleep(1 / rate)
    finally:
        await producer.stop()


@app.command(option("--from-beginning", is_flag=True, default=False, help="Replay the topic."))
async def watch(self: object, from_beginning: bool) -> None:
    """Print each revision of the output topic as one readable line."""
    consumer = AIOKafkaConsumer(settings.output_topic,
                                bootstrap_servers=bootstrap_servers(settings.broker_url),
                                auto_offset_reset="earliest" if from_beginning else "latest")
    await consumer.start()
    try:
        async for msg in consumer:
            r = json.loads(msg.value)
            what = (f"CORRECTION {r['previous_mood']} -> {r['mood']}" if r["revision"] > 1
                    else f"joined mood={r['mood']}")
            print(f"{r['consultant']:>6} {r['recommendation']:<8} t={r['event_time']} "
                  f"rev {r['revision']} [{r['cause']}] {what}", flush=True)
    finally:
        await consumer.stop()

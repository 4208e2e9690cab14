"""The chaos run's input: steady out-of-order traffic for all three joins, and its sender.

Event time is tied to the record's index, not to the wall clock: every join's stream advances
``EVENT_MS_PER_S`` of event time per second of traffic whatever the rate, so a burst after a
stalled broker, or a backlog after a restart, is the same records with the same event times.
The retention the workers run with (``RETENTION_MS``) is a few minutes of that event time: the
state of every join is purged in steady state (worker memory can level off), yet far longer
than any disorder the generators make (3 s jitter, 20 s late), so nothing is late and the
exact answer over every record sent is what the stream must end on.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from app.commands.sample_traffic import Record, sample_cars_and_zones, sample_moods_and_events
from tests.faults import Sent
from tests.harness import Names, bootstrap, encode

START = 1_790_000_000_000
#: event time each join's stream advances per second of traffic
EVENT_MS_PER_S = 3_000
#: mood and movies joins' retention and window (event time): 100 s of traffic
RETENTION_MS = 300_000
CONSULTANTS = tuple(f"c{i}" for i in range(100))
CARS, ZONES, MOVIES = 300, 20, 200
#: records per join per generated chunk
CHUNK = 3_000


def sample_movies_and_ratings(
    seed: int,
    count: int,
    start_ms: int,
    step_ms: int,
    movies: int,
    first_versions: bool,
    disorder_ms: int = 3000,
    late_ratio: float = 0.1,
    late_delay_ms: int = 20_000,
    version_ratio: float = 0.05,
) -> list[Record]:
    """Ratings and movie versions in *arrival* order, as the other generators.

    ``first_versions``: every movie's first version (event time just before every rating, so a
    rating always has a version at or before it) arrives among the chunk's first tenth: ratings
    that come before it are held until it does. Later versions are stamped near stream time,
    a ``late_ratio`` share arriving ``late_delay_ms`` late: they correct recent ratings only,
    never one already past the retention horizon (that one would be final).
    """
    rng = random.Random(seed)
    timed: list[tuple[int, int, Record]] = []
    if first_versions:
        for m in range(movies):
            mid = f"m{m}"
            timed.append(
                (
                    start_ms + rng.randrange(count * step_ms // 10 + 1),
                    -1 - m,
                    (
                        "movie",
                        mid,
                        {"movie_id": mid, "title": f"{mid} first", "event_time": start_ms - 1},
                    ),
                )
            )
    for i in range(count):
        t = start_ms + i * step_ms + rng.randrange(step_ms)
        arrival = t + rng.randrange(disorder_ms + 1)
        mid = f"m{rng.randrange(movies)}"
        if rng.random() < version_ratio:
            rec: Record = (
                "movie",
                mid,
                {"movie_id": mid, "title": f"{mid} v{seed}-{i}", "event_time": t},
            )
            if rng.random() < late_ratio:
                arrival += late_delay_ms
        else:
            rec = (
                "rating",
                mid,
                {
                    "id": f"rt-{seed}-{i}",
                    "movie_id": mid,
                    "user_id": f"u{rng.randrange(1000)}",
                    "rating": rng.randrange(1, 11) / 2,
                    "event_time": t,
                },
            )
        timed.append((arrival, i, rec))
    timed.sort()
    return [rec for _, _, rec in timed]


def traffic(seed: int, rate: float) -> Iterator[Record]:
    """Endless records of the three joins, interleaved one by one (the same pace for each)."""
    step = max(1, round(EVENT_MS_PER_S * 3 / rate))  # each join gets a third of ``rate``
    n = 0
    while True:
        s, start = seed * 100_000 + n, START + n * CHUNK * step
        moods = sample_moods_and_events(
            s, CHUNK, start, step_ms=step, late_ratio=0.2, consultants=CONSULTANTS
        )
        cars = sample_cars_and_zones(s, CHUNK, start, cars=CARS, zones=ZONES, step_ms=step)
        films = sample_movies_and_ratings(s, CHUNK, start, step, MOVIES, first_versions=n == 0)
        for i in range(max(map(len, (moods, cars, films)))):
            for chunk in (moods, cars, films):
                if i < len(chunk):
                    yield chunk[i]
        n += 1


def topics(names: Names) -> dict[str, str]:
    """Input kind -> topic."""
    return {
        "mood": names.moods_topic,
        "event": names.events_topic,
        "car": names.car_arrivals_topic,
        "zone": names.zones_topic,
        "movie": names.movies_topic,
        "rating": names.ratings_topic,
    }


class Sender:
    """Sends ``traffic`` at ``rate`` records/s, in producer batches, and keeps where each record
    landed (``sent``). A stalled or restarting broker holds the sends back; the schedule does
    not move, so the records due meanwhile go as a burst once it answers again. A send that
    fails is sent again (``resent``): the broker may hold both copies, which the joins treat
    as the duplicates they are."""

    def __init__(self, names: Names, seed: int, rate: float) -> None:
        self.names, self.rate = names, rate
        self.records = traffic(seed, rate)
        self.topic = topics(names)
        self.sent: list[Sent] = []
        self.resent = 0

    async def run(self, until: float) -> None:
        """Send until the monotonic time ``until``."""
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap(self.names),
            linger_ms=5,
            request_timeout_ms=30_000,
            max_request_size=4 << 20,
        )
        await producer.start()
        try:
            t0, due_before = time.monotonic(), 0
            while time.monotonic() < until:
                due = min(int((time.monotonic() - t0) * self.rate), due_before + 5_000)
                batch = [next(self.records) for _ in range(due - due_before)]
                due_before = due
                futures = [await self._send(producer, r) for r in batch]
                for rec, fut in zip(batch, futures):
                    await self._settle(producer, rec, fut)
                await asyncio.sleep(0.05)
        finally:
            await producer.stop()

    async def _send(self, producer: AIOKafkaProducer, rec: Record) -> Any:
        kind, key, value = rec
        while True:
            try:
                return await producer.send(self.topic[kind], encode(value), key=encode(key))
            except KafkaError:  # no metadata while the broker is down: try again
                await asyncio.sleep(0.5)

    async def _settle(self, producer: AIOKafkaProducer, rec: Record, fut: Any) -> None:
        kind, key, value = rec
        while True:
            try:
                meta = await fut
                self.sent.append(Sent(kind, key, value, meta.topic, meta.partition, meta.offset))
                return
            except KafkaError:
                self.resent += 1
                await asyncio.sleep(0.5)
                fut = await self._send(producer, rec)

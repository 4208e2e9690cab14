"""kill -9 (no flush, no commit, no goodbye) of workers mid-stream, on a real broker.

Mood join, after each fault: the latest revision per join id equals the exact answer, no
revision number carries two answers, the retracting mood-count consumer equals the counts over
the exact answer, and every input record is accounted for. Car join: the consumer rule's view
(newest output per car) equals the exact car view.
"""

from __future__ import annotations

import asyncio
import random

from app.commands.sample_traffic import sample_moods_and_events
from app.logic.car_join import CarPollution, newest_per_car
from tests.faults import diff, fates_of, processed, send, settle_and_check, wait_processed
from tests.harness import read_all, wait_for
from tests.oracle import exact_car_answer

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(12))


async def test_kill_9_mid_stream_then_restart_is_exact(names, worker_factory):
    records = sample_moods_and_events(
        seed=21, count=220, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    first = worker_factory(names, name="first").wait_ready()

    # 1. traffic flows; once the worker has consumed a third of it, kill -9 it mid-stream
    sending = asyncio.create_task(send(names, records, pace_s=0.03))
    seen = await asyncio.to_thread(wait_processed, first, len(records) // 3)
    assert first.kill() == -9
    assert not sending.done(), "the kill must land while records are still being sent"
    # 2. the rest is sent while no worker runs; a fresh process recovers the tables
    sent = await sending
    second = worker_factory(names, name="second").wait_ready()

    revs = await settle_and_check(names, records, sent, [second])
    assert 0 < seen < len(records)
    # records the first process had consumed but not committed are consumed again: harmless
    assert processed(second) >= len(records) - seen
    assert any(r["revision"] > 1 for r in revs), "the scenario must contain corrections"


async def two_workers_then_kill_b(names, worker_factory, records):
    """Two workers share the partitions; b is killed -9 mid-stream; a takes b's partitions."""
    a = worker_factory(names, name="a").wait_ready()
    b = worker_factory(names, name="b").wait_ready()
    a.wait_ready(count=2, timeout_s=90)  # a rebalanced when b joined
    assert a.assigned(names.events_topic) and b.assigned(names.events_topic)
    sent = await send(names, records[:80], pace_s=0.02)
    sending = asyncio.create_task(send(names, records[80:160], pace_s=0.03))
    await asyncio.sleep(0.5)
    assert b.kill() == -9
    sent += await sending
    # after the session timeout a is given b's partitions and recovers their tables
    a.wait_ready(count=3, timeout_s=120)
    assert a.assigned(names.events_topic) in ("{0-3}", "{0, 1, 2, 3}"), a.assigned(
        names.events_topic
    )
    return a, sent


RECORDS_2W = {
    "seed": 23,
    "count": 240,
    "start_ms": START,
    "late_ratio": 0.3,
    "consultants": CONSULTANTS,
}


async def test_two_workers_one_killed_the_survivor_alone_is_exact(names, worker_factory):
    records = sample_moods_and_events(**RECORDS_2W)
    a, sent = await two_workers_then_kill_b(names, worker_factory, records)
    await settle_and_check(names, records[:160], sent, [a], timeout_s=90)


async def test_two_workers_one_killed_then_it_comes_back_is_exact(names, worker_factory):
    records = sample_moods_and_events(**RECORDS_2W)
    a, sent = await two_workers_then_kill_b(names, worker_factory, records)
    # the killed worker comes back: a rebalance moves partitions again; the rest of the traffic
    b2 = worker_factory(names, name="b-again").wait_ready()
    a.wait_ready(count=4, timeout_s=120)
    assert b2.assigned(names.events_topic), "the returning worker got no partition"
    sent += await send(names, records[160:], pace_s=0.02)
    revs = await settle_and_check(names, records, sent, [a, b2])
    assert any(r["revision"] > 1 for r in revs)


# --- the car join (one-to-many): kill -9 of the worker mid-stream ------------------------------


def cars_and_zones(seed: int, count: int) -> list[tuple[str, str, dict]]:
    """Car arrivals and zone readings with event times stepping forward, arriving shuffled
    within windows of 8 (out of order, some arrivals older than the car's newest)."""
    rng = random.Random(seed)
    records: list[tuple[str, str, dict]] = []
    for i in range(count):
        t = START + i * 1000 + rng.randrange(1000)
        if rng.random() < 0.2:
            z = rng.randrange(1, 5)
            records.append(
                (
                    "zone",
                    str(z),
                    {
                        "zone_id": z,
                        "event_time": t,
                        "pollution_level": round(rng.uniform(0, 200), 1),
                    },
                )
            )
        else:
            c = rng.randrange(1, 21)
            records.append(
                (
                    "car",
                    str(c),
                    {
                        "car_id": c,
                        "to_zone_id": rng.randrange(1, 5),
                        "event_time": t,
                        "fuel_level": round(rng.uniform(0, 1), 3),
                    },
                )
            )
    for start in range(0, count, 8):
        window = records[start : start + 8]
        rng.shuffle(window)
        records[start : start + 8] = window
    return records


async def car_view(names) -> dict[int, CarPollution]:
    return newest_per_car(
        CarPollution.from_wire(v)
        for _, v in await read_all(names, names.car_pollution_topic, idle_s=1.5)
    )


async def test_kill_9_mid_stream_then_restart_is_exact_for_the_car_join(names, worker_factory):
    records = cars_and_zones(seed=5, count=200)
    expected = exact_car_answer(records)
    topics = {"car": names.car_arrivals_topic, "zone": names.zones_topic}
    first = worker_factory(names, name="first").wait_ready()

    sending = asyncio.create_task(send(names, records, pace_s=0.03, topics=topics))
    await asyncio.to_thread(wait_processed, first, len(records) // 3)
    assert first.kill() == -9
    assert not sending.done(), "the kill must land while records are still being sent"
    await sending
    worker_factory(names, name="second").wait_ready()

    async def exact() -> dict[int, CarPollution]:
        view = await car_view(names)
        return view if view == expected else {}

    view = await wait_for(exact, timeout_s=150) or await car_view(names)
    assert view == expected, diff(view, expected)
    assert not (await fates_of(names)).dead

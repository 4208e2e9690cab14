"""Tombstones on a dimension topic, on a real broker, through a kill -9 of the worker (issue 58,
item 4).

The mood join's out-of-order workload (moods up to 23 s late) with tombstones among the moods:
each ends its consultant's mood at its Kafka timestamp, some arrive after the recommendations
they end (corrections to null), some before moods stamped earlier than them. The worker is
killed -9 mid-stream and a fresh one recovers. Read back: every join's latest revision is the
oracle's (tests/oracle.py, which knows ends), no revision number carries two answers, numbers
have no gap, and the worker counted the tombstones.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from aiokafka import AIOKafkaProducer

from app.commands.sample_traffic import sample_moods_and_events
from tests.faults import (
    answers,
    check_revision_log,
    diff,
    processed,
    wait_converged,
    wait_processed,
    worker_metrics,
)
from tests.harness import Names, bootstrap, encode
from tests.oracle import exact_mood_answer

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(8))
COUNT = 200


def with_tombstones(records: list[Any], seed: int) -> list[Any]:
    """``records`` (arrival order) with tombstones among them: ``("tombstone", consultant,
    its Kafka timestamp)``, each stamped in the workload's time span and sent up to 25 records
    late or early (the moods around it arrive before and after it)."""
    rng = random.Random(seed)
    out = list(records)
    for _ in range(COUNT // 8):
        i = rng.randrange(len(records))
        at = START + i * 1000 + rng.randrange(1000)  # ~ the time of the i-th record
        pos = max(0, min(len(out), i + rng.randrange(-25, 26)))
        out.insert(pos, ("tombstone", rng.choice(CONSULTANTS), at))
    return out


async def send_all(names: Names, records: list[Any], pace_s: float) -> None:
    """Send in order with one producer; a tombstone as a null value with its timestamp."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await producer.start()
    try:
        for kind, key, value in records:
            topic = names.events_topic if kind == "event" else names.moods_topic
            if kind == "tombstone":
                await producer.send_and_wait(topic, None, key=key.encode(), timestamp_ms=value)
            else:
                await producer.send_and_wait(topic, encode(value), key=encode(key))
            await asyncio.sleep(pace_s)
    finally:
        await producer.stop()


async def test_tombstones_end_versions_exactly_through_a_kill_9(names, worker_factory):
    records = with_tombstones(
        sample_moods_and_events(
            seed=58, count=COUNT, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
        ),
        seed=58,
    )
    expected = exact_mood_answer(records)
    ended = exact_mood_answer([r for r in records if r[0] != "tombstone"])
    changed = {jid for jid in expected if expected[jid] != ended[jid]}
    assert len(changed) > 5, "the tombstones must change answers"
    first = worker_factory(names, name="first").wait_ready()

    # 1. traffic flows; once a third of it is consumed, kill -9 the worker mid-stream
    sending = asyncio.create_task(send_all(names, records, pace_s=0.02))
    seen = await asyncio.to_thread(wait_processed, first, len(records) // 3)
    assert first.kill() == -9
    assert not sending.done(), "the kill must land while records are still being sent"
    await sending
    # 2. a fresh process recovers the tables (the ends among the versions) and goes on
    second = worker_factory(names, name="second").wait_ready()
    revs = await wait_converged(names, expected, timeout_s=60)
    got = answers(revs)
    assert got == expected, diff(got, expected)
    check_revision_log(revs)
    assert 0 < seen < len(records) and processed(second) > 0
    # the ends corrected joins already answered: null revisions after a mood
    assert any(r["mood"] is None and r["previous_mood"] is not None for r in revs)
    tombstones = worker_metrics(second).get("etj_tombstones_total", {})
    assert sum(tombstones.values()) > 0, tombstones

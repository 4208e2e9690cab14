"""One topic, two joins, through their loops (app.compat.consumer -> app.loop.durable): the
consumer hands the topic's batch to both loops; each judges every record by its own spec (a
record bad for both is one dead letter per join, each naming it); the partition is committed
only once both have delivered what they made of it.

Two specs re-key the same click topic (``"repartition": true``: their hops are whole agents
with no tables, so the test needs no join state); ``share-b`` also needs a ``page``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP
from intervaltree import IntervalTree

from app.agents.repartition import RepartitionEngine
from app.compat import log_gaps
from app.compat.consumer import EtjConsumer
from app.faust_app import app, settings
from app.joins.resolve import resolve_all
from app.topology import RepartitionHop
from tests.agent.conftest import captured, handle

CLICKS = TP("sharetest-clicks", 1)


def spec(name: str, fields: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "events": {
            "topic": CLICKS.topic,
            "key": "user.id",
            "time": "at",
            "id": "id",
            "repartition": True,
            "fields": {"id": "str", "user.id": "str", "at": "time", **fields},
            "copy": ["user.id", "at"],
        },
        "dimension": {
            "topic": f"{name}-plans",
            "key": "user",
            "time": "at",
            "fields": {"user": "str", "plan": "str", "at": "time"},
            "copy": ["plan"],
            "time_as": "plan_time",
        },
        "output": f"{name}-out",
        "ticks": f"{name}-ticks",
        "retention_ms": 10**9,
    }


def hops() -> tuple[RepartitionEngine, RepartitionEngine]:
    a, b = resolve_all(
        [spec("share-a", {}), spec("share-b", {"page": "str"})], app_id=settings.app_id
    )  # two specs on one topic: accepted
    return tuple(  # type: ignore[return-value]
        RepartitionEngine(
            RepartitionHop(
                s, "events", s.events, app.topic(CLICKS.topic), app.topic(s.events.input)
            )
        )
        for s in (a, b)
    )


@pytest.fixture
def consumer() -> Iterator[EtjConsumer]:
    c = app.consumer
    assert isinstance(c, EtjConsumer)
    saved = {t: list(rs) for t, rs in c.inboxes.items()}
    with (
        mock.patch.object(log_gaps, "_skipped", defaultdict(IntervalTree)),
        mock.patch.object(type(c), "highwater", lambda self, tp: 13),
    ):
        c._committed_offset[CLICKS] = 10
        yield c
    c.inboxes.clear()
    c.inboxes.update(saved)
    for d in (c._next, c._acked_end, c._acked_by, c._held_back):
        d.clear()
    c._committed_offset.pop(CLICKS, None)


def click(offset: int, value: dict[str, Any]) -> ConsumerRecord:
    raw = json.dumps(value).encode()
    return ConsumerRecord(
        CLICKS.topic, 1, offset, 900 + offset, 0, b"s", raw, None, 1, len(raw), []
    )


async def test_both_joins_get_every_record_and_the_commit_waits_for_the_slower(consumer):
    a, b = hops()
    consumer.route(a.loop.inbox)
    consumer.route(b.loop.inbox)
    good = {"id": "c1", "user": {"id": "u1"}, "at": 1000, "page": "/"}
    await consumer._hand_over(
        {
            CLICKS: [
                click(10, good),
                click(11, {**good, "id": "c2", "page": None}),  # no page: bad for share-b only
                click(12, {"id": "c3", "at": 5}),  # no user.id: bad for both
            ]
        }
    )
    with captured() as sent:
        await handle(a.loop, a.loop.inbox.take_nowait())
        # share-a delivered all three; share-b has handled nothing: nothing to commit yet
        assert a.loop.acked.holds(CLICKS.topic, 1, 12)
        assert consumer.acked_end(CLICKS) == 10
        await handle(b.loop, b.loop.inbox.take_nowait())
    assert consumer.acked_end(CLICKS) == 13  # both done with 10-12

    passed = [(t, k) for t, k, _ in sent if t != settings.dead_letter_topic]
    assert passed == [(a.target, b"u1"), (a.target, b"u1"), (b.target, b"u1")]
    letters = [json.loads(v) for t, _, v in sent if t == settings.dead_letter_topic]
    assert sorted((d["join"], d["offset"]) for d in letters) == [
        ("share-a", 12),
        ("share-b", 11),
        ("share-b", 12),
    ]
    assert all(d["topic"] == CLICKS.topic for d in letters)

"""The repartition hop's loop (app.agents.repartition), fed batches by hand: each record is
passed on to the repartition topic keyed by its join key, as it came (value, timestamp,
headers); a record the join would refuse is a dead letter naming the side's topic and never
reaches the repartition topic; the source offsets are acked only once what was passed on is
delivered (the durable loop's protocol)."""

from __future__ import annotations

import json
from collections import namedtuple

from faust.types import TP

from app.agents.repartition import RepartitionEngine
from app.faust_app import app, settings
from app.inputs.inbox import Batch
from app.joins.resolve import resolve
from app.topology import RepartitionHop
from tests.agent.conftest import captured, handle

#: aiokafka's ConsumerRecord, the fields a hop reads
Record = namedtuple("Record", "topic partition offset key value timestamp headers")

SPEC = {
    "name": "hoptest",
    "events": {
        "topic": "hoptest-clicks",
        "key": "user.id",
        "time": "at",
        "id": "id",
        "repartition": True,
        "fields": {"id": "str", "user.id": "str", "at": "time"},
        "copy": ["user.id", "at"],
    },
    "dimension": {
        "topic": "hoptest-plans",
        "key": "user",
        "time": "at",
        "fields": {"user": "str", "plan": "str", "at": "time"},
        "copy": ["plan"],
        "time_as": "plan_time",
    },
    "output": "hoptest-out",
    "ticks": "hoptest-ticks",
    "retention_ms": 10**9,
}


def hop_engine() -> RepartitionEngine:
    spec = resolve(SPEC, app_id=settings.app_id)
    side = spec.events
    return RepartitionEngine(
        RepartitionHop(
            spec, "events", side, app.topic(side.topic), app.topic(side.input, internal=True)
        )
    )


async def test_a_hop_passes_records_on_by_join_key_and_dead_letters_what_the_join_refuses():
    engine = hop_engine()
    target = f"{settings.app_id}-hoptest-events-repartition"
    assert engine.target == target
    value = {"id": "c1", "user": {"id": "u1"}, "at": 1000}
    records = [
        Record(
            "hoptest-clicks",
            2,
            10,
            b"session-1",
            json.dumps(value).encode(),
            990,
            [("origin", b"web")],
        ),
        Record("hoptest-clicks", 2, 11, None, json.dumps({**value, "id": "c2"}).encode(), 991, []),
        Record("hoptest-clicks", 2, 12, b"session-2", b'{"id": "c3", "at": 5}', 992, []),
    ]
    with captured() as sent:
        passed: list = []
        real = engine.pass_on

        def spy(topic, record, parsed):  # what the loop hands on to the producer
            outs = real(topic, record, parsed)
            passed.extend(outs)
            return outs

        engine.pass_on = spy  # type: ignore[method-assign]
        await handle(
            engine.loop, [Batch("hoptest-clicks", 2, records, 13, app.consumer_generation_id)]
        )
    assert [(o.topic, o.key, o.timestamp, o.headers) for o in passed[:2]] == [
        (target, b"u1", 990, [("origin", b"web")]),
        (target, b"u1", 991, []),
    ]
    assert [json.loads(o.value)["id"] for o in passed[:2]] == ["c1", "c2"]  # unchanged
    [(topic, key, dead)] = [s for s in sent if s[0] == settings.dead_letter_topic]
    dead = json.loads(dead)
    assert (key, dead["topic"], dead["offset"]) == (b"session-2", "hoptest-clicks", 12)
    assert "user.id: missing" in dead["error"]
    assert [s[0] for s in sent] == [target, target, settings.dead_letter_topic]
    # acked once delivered: the whole batch, as one range
    assert engine.loop.acked.holds("hoptest-clicks", 2, 12)
    assert app.consumer._acked_end.get(TP("hoptest-clicks", 2)) == 13

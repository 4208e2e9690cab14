"""The mood join (the ``moods`` spec's agent) with Faust's test_context(): fast, no broker.

They drive the real agent's loop with records on each of its topics and check what it sends and
what it leaves in its tables (history, joins, clock: the spec's tables).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.agents.event_join import engines
from app.faust_app import settings
from app.joins.joins_table import stored_versions

_t = engines["moods"].tables
stream_clock = _t.clock


def moods_of(key: str, partition: int = 0) -> Any:
    """The key's versions as stored (one ``V`` row each in the joins table), or None."""
    return stored_versions(_t.joins, _t.history, key, partition)


@pytest.fixture
async def harness(join_harness: Any) -> AsyncIterator[Any]:
    async with join_harness("moods") as h:
        yield h


async def test_recommendation_then_late_mood_emits_arrival_then_correction(harness):
    await harness.put(
        settings.events_topic,
        "ann",
        {"consultant": "ann", "recommendation": "tea", "event_time": 100, "id": "j"},
    )
    await harness.put(
        settings.moods_topic, "ann", {"name": "ann", "mood": "happy", "event_time": 50}
    )
    out = harness.outputs(settings.output_topic)
    assert [(r["revision"], r["mood"], r["previous_mood"], r["cause"]) for r in out] == [
        (1, None, None, "arrival"),
        (2, "happy", None, "late-dimension"),
    ]
    assert moods_of("ann") == [[50, "happy"]]
    assert harness.joins("ann")["j"].revision == 2  # revision held in state
    assert stream_clock[0] == 100


async def test_bad_record_becomes_a_dead_letter_and_the_agent_goes_on(harness):
    await harness.put(settings.moods_topic, "ann", b"{oops")
    await harness.put(
        settings.events_topic,
        "ann",
        {"consultant": "ann", "recommendation": "tea", "event_time": 5},
    )
    [dead] = harness.outputs(settings.dead_letter_topic)
    assert dead["topic"] == settings.moods_topic and "not valid JSON" in dead["error"]
    assert dead["value"] == "{oops"
    assert [r["recommendation"] for r in harness.outputs(settings.output_topic)] == ["tea"]


async def test_too_old_record_goes_to_late_and_leaves_state_alone(harness):
    now = 10 * settings.retention_ms
    await harness.put(
        settings.events_topic,
        "ann",
        {"consultant": "ann", "recommendation": "a", "event_time": now, "id": "a"},
    )
    await harness.put(
        settings.moods_topic,
        "ann",
        {"name": "ann", "mood": "sad", "event_time": now - settings.retention_ms - 1},
    )
    [late] = harness.outputs(settings.late_topic)
    assert late["record"]["mood"] == "sad" and late["horizon"] == now - settings.retention_ms
    assert moods_of("ann") is None


async def test_tick_purges_state_behind_the_horizon(harness):
    r = settings.retention_ms
    await harness.put(settings.moods_topic, "ann", {"name": "ann", "mood": "a", "event_time": 10})
    await harness.put(settings.moods_topic, "ann", {"name": "ann", "mood": "b", "event_time": 20})
    await harness.put(
        settings.events_topic,
        "ann",
        {"consultant": "ann", "recommendation": "x", "event_time": 30, "id": "x"},
    )
    await harness.put(
        settings.events_topic,
        "ann",
        {"consultant": "ann", "recommendation": "y", "event_time": 31 + r, "id": "y"},
    )
    await harness.put(settings.ticks_topic, None, b"{}")
    assert list(harness.joins("ann")) == ["y"]  # x is final and dropped
    assert moods_of("ann") == [[20, "b"]]  # the last mood before the horizon stays


async def test_a_redelivered_recommendation_re_emits_its_revision_only_if_undelivered(harness):
    rec = {"consultant": "ann", "recommendation": "tea", "event_time": 100, "id": "j"}
    await harness.put(settings.moods_topic, "ann", {"name": "ann", "mood": "sad", "event_time": 50})
    await harness.put(settings.events_topic, "ann", rec, offset=7)
    first = harness.outputs(settings.output_topic)
    assert [(r["revision"], r["mood"]) for r in first] == [(1, "sad")]
    # delivered (acked by this process): the same record again changes nothing, sends nothing
    await harness.put(settings.events_topic, "ann", rec, offset=7)
    assert harness.outputs(settings.output_topic) == first
    # a restarted worker knows nothing acked: the record read again re-emits revision 1 as it was
    harness.loop.drop_waiting()
    await harness.put(settings.events_topic, "ann", rec, offset=7)
    assert harness.outputs(settings.output_topic) == first + first
    await harness.put(settings.ticks_topic, None, b"{}")  # a tick re-emits nothing
    assert len(harness.outputs(settings.output_topic)) == 2


async def test_a_bug_in_parsing_dead_letters_the_record_and_the_agent_goes_on(harness):
    """Found by the hostile-input broker test: msgspec raised RecursionError on a deeply nested
    value outside the handler's guard, and the agent crashed (Faust restarted it)."""
    engine = harness.engine
    real = engine._parsers[settings.moods_topic]

    def parser(key, value, *rest):
        if value == b'{"boom": 1}':
            raise RuntimeError("boom")
        return real(key, value, *rest)

    engine._parsers[settings.moods_topic] = parser
    try:
        await harness.put(settings.moods_topic, "ann", {"boom": 1})
        await harness.put(
            settings.moods_topic, "ann", {"name": "ann", "mood": "ok", "event_time": 5}
        )
    finally:
        engine._parsers[settings.moods_topic] = real
    [dead] = harness.outputs(settings.dead_letter_topic)
    assert dead["error"] == "internal error: RuntimeError('boom')"
    assert moods_of("ann") == [[5, "ok"]]


async def test_the_door_dead_letters_a_wrong_partition_and_a_record_from_the_future(
    harness, monkeypatch
):
    """app.inputs.admission in the loop: a record in the partition a CRC32 producer would choose and
    one stamped a year ahead are dead letters that say why and are counted; neither touches
    state nor moves stream time, and what comes after joins as if they had not come."""
    from app import metrics
    from app.faust_app import app
    from tests.kafka_io import partitions_of

    monkeypatch.setattr(app.consumer, "topic_partitions", lambda topic: 4, raising=False)
    [p] = partitions_of([b"ann"], 4)
    refused = metrics.refused.labels("moods", settings.moods_topic, "partitioner")
    before = refused._value.get()
    await harness.put(
        settings.events_topic,
        "ann",
        {"consultant": "ann", "recommendation": "tea", "event_time": 1_000, "id": "a"},
        partition=p,
    )
    await harness.put(
        settings.moods_topic,
        "ann",
        {"name": "ann", "mood": "sad", "event_time": 500},
        partition=(p + 1) % 4,
    )
    year_ahead = int(time.time() * 1000) + 365 * 86_400_000
    await harness.put(
        settings.moods_topic,
        "ann",
        {"name": "ann", "mood": "odd", "event_time": year_ahead},
        partition=p,
    )
    await harness.put(
        settings.events_topic,
        "ann",
        {"consultant": "ann", "recommendation": "cake", "event_time": 2_000, "id": "b"},
        partition=p,
    )
    wrong, future = harness.outputs(settings.dead_letter_topic)
    assert "partitioner=murmur2_random" in wrong["error"] and wrong["value"].count("sad")
    assert "ms ahead of" in future["error"] and "ETJ_MAX_FUTURE_MS" in future["error"]
    assert refused._value.get() == before + 1
    assert moods_of("ann", p) is None and moods_of("ann", (p + 1) % 4) is None
    assert stream_clock[p] == 2_000
    assert harness.outputs(settings.late_topic) == []
    assert [(r["id"], r["mood"]) for r in harness.outputs(settings.output_topic)] == [
        ("a", None),
        ("b", None),
    ]

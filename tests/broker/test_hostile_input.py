"""Hostile input on a real broker: every kind ends in etj-dead-letters with a reason a person
understands, or is accepted by a documented rule (docs/concepts/guarantees.md); the worker
stays up and every record is accounted for: records in = accepted + dead letters + late.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tests.faults import (
    Sent,
    answers,
    check_accounting,
    diff,
    fates_of,
    mood_history,
    send,
    wait_converged,
    worker_metrics,
)
from tests.harness import wait_for
from tests.oracle import exact_mood_answer

START = 1_790_000_000_000
T = START + 10_000
MB = 1_000_000  # a "1 MB" string: under the broker's default 1 MiB record limit with its JSON


def mood(**fields: Any) -> dict[str, Any]:
    return {"name": "ann", "mood": "calm", "event_time": T, **fields}


def event(**fields: Any) -> dict[str, Any]:
    return {"consultant": "ann", "recommendation": "tea", "event_time": T + 5, **fields}


async def has_mood(w: Any, event_time: int) -> None:
    async def seen() -> bool:
        return event_time in {t for t, _ in mood_history([w], ["ann"]).get("ann", ())}

    assert await wait_for(seen, timeout_s=60), f"the mood at {event_time} was never consumed"


def raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def without(d: dict[str, Any], field: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != field}


# (what, input kind, key, value bytes or None, phrase the dead-letter reason must contain)
HOSTILE_MOODS: list[tuple[str, str, Any, bytes | None, str]] = [
    ("invalid JSON", "mood", "ann", b'{"name": "ann", "mood": ', "not valid JSON"),
    ("non-UTF-8 bytes", "mood", "ann", b"\xff\xfe\x00\x81", "not UTF-8"),
    ("empty value", "mood", "ann", b"", "empty value"),
    # a tombstone on the moods topic is a delete (ann's mood ends): one whose key is no name
    # is not (a producer sends a null value with a key only)
    ("tombstone with an empty key", "mood", "", None, "tombstone key: name"),
    ("JSON null", "mood", "ann", b"null", "JSON object, got null"),
    ("JSON array", "mood", "ann", raw([mood()]), "JSON object, got array"),
    ("JSON scalar", "mood", "ann", b'"calm"', "JSON object, got string"),
    ("missing field", "mood", "ann", raw(without(mood(), "mood")), "mood: missing"),
    ("wrong type", "mood", "ann", raw(mood(event_time="yesterday")), "valid integer"),
    ("boolean as a number", "mood", "ann", raw(mood(event_time=True)), "valid integer"),
    ("float event time", "mood", "ann", raw(mood(event_time=T + 0.5)), "valid integer"),
    ("negative event time", "mood", "ann", raw(mood(event_time=-1)), "greater than or equal to 0"),
    (
        "event time in year 3000",
        "mood",
        "ann",
        raw(mood(event_time=32_503_680_000_000)),
        "less than 4102444800000",
    ),
    ("NaN event time", "mood", "ann", raw(mood(event_time=math.nan)), "(got nan)"),
    ("Infinity event time", "mood", "ann", raw(mood(event_time=math.inf)), "(got inf)"),
    ("1 MB string", "mood", "ann", raw(mood(mood="x" * MB)), "at most 200 characters"),
    (
        "5000-digit number",
        "mood",
        "ann",
        b'{"name": "ann", "mood": "calm", "event_time": ' + b"9" * 5000 + b"}",
        "digits",
    ),
    ("JSON nested 100k deep", "mood", "ann", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("key disagrees with name", "mood", "bob", raw(mood()), "disagrees with name"),
    ("no key", "mood", None, raw(mood()), "no key"),
    ("100 KB key", "mood", "k" * 100_000, raw(mood()), "disagrees with name"),
    (
        "lone surrogate escape",
        "mood",
        "ann",
        b'{"name": "ann", "mood": "\\ud800", "event_time": ' + str(T).encode() + b"}",
        "valid string",
    ),
    ("UTF-8 byte order mark", "mood", "ann", b"\xef\xbb\xbf" + raw(mood()), "BOM"),
    (
        "duplicate field names",
        "mood",
        "ann",
        b'{"name": "ann", "mood": "calm", "mood": "sad", "event_time": ' + str(T).encode() + b"}",
        "duplicate field 'mood'",
    ),
    ("empty name", "mood", "", raw(mood(name="")), "at least 1 character"),
    ("null mood", "mood", "ann", raw(mood(mood=None)), "valid string"),
]
HOSTILE_EVENTS: list[tuple[str, str, Any, bytes | None, str]] = [
    (
        "1 MB recommendation",
        "event",
        "ann",
        raw(event(recommendation="r" * MB)),
        "at most 10000 characters",
    ),
    ("empty id", "event", "ann", raw(event(id="")), "id: String should have at least 1"),
    ("numeric id", "event", "ann", raw(event(id=7)), "id: Input should be a valid string"),
    (
        "missing consultant",
        "event",
        "ann",
        raw(without(event(), "consultant")),
        "consultant: missing",
    ),
    ("invalid JSON event", "event", "ann", b"{oops", "not valid JSON"),
    ("tombstone event", "event", "ann", None, "on an events topic is not a delete"),
    ("NaN event time", "event", "ann", raw(event(event_time=math.nan)), "(got nan)"),
]
# accepted by a documented rule (docs/concepts/guarantees.md#input-rules)
ACCEPTED: list[tuple[str, str, Any, Any]] = [
    (
        "unknown extra fields are ignored",
        "mood",
        "ann",
        mood(event_time=START, mood="happy", colour="blue", nested={"a": [1]}),
    ),
    (
        "ingestion_time is optional and not used by the join",
        "mood",
        "ann",
        mood(event_time=START + 1, mood="bored", ingestion_time=START + 99),
    ),
    (
        "unknown extra fields on an event",
        "event",
        "ann",
        event(id="e-extra", event_time=START + 2, channel="web"),
    ),
    (
        "an event with no id gets a derived id",
        "event",
        "ann",
        event(event_time=START + 3, recommendation="map"),
    ),
    (
        "a control character is still text",
        "event",
        "ann",
        event(id="e-ctrl", event_time=T + 6, recommendation="tea\u0000\u0007"),
    ),
]
LATE = [
    ("late mood", "mood", "ann", mood(event_time=START - 61_000, mood="old")),
    ("late event", "event", "ann", event(event_time=START - 70_000, id="e-late")),
]
GOOD = [
    ("mood", "ann", mood(event_time=T - 100, mood="calm")),
    ("event", "ann", event(id="e-good")),
]
# a clock or unit bug: inside the valid range (up to 2099), so not a bad record, but it would
# move its partition's stream time to 2099 and make every later record late: refused at the
# door as a record from the future (app.inputs.admission, ETJ_MAX_FUTURE_MS), it leaves no trace
FAR_FUTURE = [
    ("mood", "ann", mood(event_time=4_102_444_799_999, mood="far")),
    ("event", "ann", event(id="e-after-far", event_time=T + 7)),
]


async def test_hostile_moods_and_events_end_in_dead_letters_and_the_worker_stays_up(
    names, worker_factory
):
    w = worker_factory(names, retention_ms=60_000).wait_ready()
    # 1. a first mood sets the stream clock; then the hostile, accepted and late records, then
    #    good records that must still be joined after all that
    hostile = HOSTILE_MOODS + HOSTILE_EVENTS
    sent = await send(names, [(k, key, v) for _, k, key, v in ACCEPTED[:1]])
    await has_mood(w, START)  # the stream clock is set before anything can be late
    sent_hostile = await send(names, [(k, key, v) for _, k, key, v, _ in hostile])
    sent_late = await send(names, [(k, key, v) for _, k, key, v in LATE])
    sent += sent_hostile + sent_late
    sent += await send(names, [(k, key, v) for _, k, key, v in ACCEPTED[1:]])
    sent += await send(names, GOOD)
    dead = {s.position for s in sent_hostile}
    late = {s.position for s in sent_late}

    # 2. every hostile record is a dead letter with its reason; nothing else is
    last: list[Any] = []

    async def all_fates() -> Any:
        last[:] = [await fates_of(names, idle_s=1)]
        return last[0] if len(last[0].dead) >= len(dead) and len(last[0].late) >= 2 else None

    fates = await wait_for(all_fates, timeout_s=90)
    assert fates is not None, (
        f"{len(last[0].dead)} dead letters of {len(dead)}, "
        f"{len(last[0].late)} late of 2: {last[0].late}"
    )
    reasons = fates.dead_reasons
    for (what, *_, phrase), s in zip(hostile, sent_hostile):
        assert s.position in reasons, f"{what}: no dead letter"
        assert phrase in reasons[s.position], f"{what}: reason {reasons[s.position]!r}"
        assert len(reasons[s.position]) < 400, f"{what}: reason too long to read"
    for s in sent_hostile:  # the original bytes are kept (base64 when not text), cut past 64 KiB
        d = fates.dead[s.position][0]
        size = 0 if s.value is None else len(s.value)
        assert d["value_encoding"] == (
            "null" if s.value is None else "base64" if s.value.startswith(b"\xff") else "text"
        )
        assert d.get("value_truncated", False) == (size > 64 * 1024)
        if size > 64 * 1024:
            assert d["value_size"] == size and len(d["value"]) == 64 * 1024
        elif d["value_encoding"] == "text":
            assert d["value"].encode() == s.value

    # 3. the worker is up, healthy, and joined the accepted records exactly as the oracle says
    assert w.proc is not None and w.proc.poll() is None
    assert w.get("/health/")[0] == 200
    accepted = [(s.kind, s.key, s.value) for s in sent if s.position not in dead | late]
    expected = exact_mood_answer(accepted)
    assert {"e-extra", "e-ctrl", "e-good"} <= set(expected)
    revs = await wait_converged(names, expected, timeout_s=60)
    assert answers(revs) == expected, diff(answers(revs), expected)

    # 4. accounting, record by record and from the worker's own counters
    fates = await fates_of(names)
    check_accounting(sent, fates, revs, mood_history([w], ["ann"]), dead, late)
    check_metrics(w, names, sent, dead, late)

    # 5. a record from the future is a dead letter naming the skew, counted; it never moves
    #    stream time: the record after it on its partition joins as if it had not come
    sent_far = await send(names, FAR_FUTURE)
    sent += sent_far
    dead.add(sent_far[0].position)

    async def far_refused() -> Any:
        f = await fates_of(names, idle_s=1)
        return f if sent_far[0].position in f.dead_reasons else None

    fates = await wait_for(far_refused, timeout_s=60)
    assert fates is not None, "the mood from the future is no dead letter"
    reason = fates.dead_reasons[sent_far[0].position]
    assert "ms ahead of" in reason and "ETJ_MAX_FUTURE_MS" in reason, reason
    accepted = [(s.kind, s.key, s.value) for s in sent if s.position not in dead | late]
    expected = exact_mood_answer(accepted)
    assert "e-after-far" in expected
    revs = await wait_converged(names, expected, timeout_s=60)
    assert answers(revs) == expected, diff(answers(revs), expected)
    assert sent_far[1].position not in (await fates_of(names)).late
    check_metrics(w, names, sent, dead, late)
    assert worker_metrics(w)["etj_refused_records_total"] == {"future": 1.0}  # by rule
    assert w.get("/health/")[0] == 200


def check_metrics(w: Any, names: Any, sent: list[Sent], dead: set[Any], late: set[Any]) -> None:
    """records in = accepted + dead letters + late, from the worker's own counters."""
    m = worker_metrics(w)
    for topic in (names.moods_topic, names.events_topic):
        n_in = sum(1 for s in sent if s.topic == topic)
        n_dead = sum(1 for p in dead if p[0] == topic)
        n_late = sum(1 for p in late if p[0] == topic)
        assert m["etj_records_in_total"][topic] == n_in, topic
        assert m["etj_dead_letters_total"].get(topic, 0) == n_dead, topic
        assert m["etj_late_records_total"].get(topic, 0) == n_late, topic

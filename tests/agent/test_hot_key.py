"""A hot key: one consultant with more joins in retention than a row could once hold.

The mood join once kept a consultant's joins in one table row, rewritten whole by every event:
tried with skewed keys, a worker fail-stopped when that row passed the broker's 1,000,000-byte
request limit (~10,000 joins), and again on every restart. A join is now a row of its own
(app.joins.state): what an event writes does not grow with its key's history. ``bench.hot_key``
measures the rate with 100,000 joins on one key.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.faust_app import app, settings
from app.inputs.inbox import Batch
from tests.agent.conftest import Record, handle
from tests.oracle import Mood, Recommendation, exact_mood_joins, mood_answer

RECS = 12_000  # past the ~10,000 joins one row could hold under the request limit
BATCH = 2_000


@pytest.fixture
async def harness(join_harness: Any) -> AsyncIterator[Any]:
    async with join_harness("moods") as h:
        yield h


def batch(topic: str, values: list[dict[str, Any]], first_offset: int) -> Batch:
    now = int(time.time() * 1000)
    records = [
        Record(topic, 0, first_offset + i, b"hot", json.dumps(v).encode(), now)
        for i, v in enumerate(values)
    ]
    return Batch(topic, 0, records, None, app.consumer_generation_id)


def size(value: Any) -> int:
    return len(value if isinstance(value, (bytes, str)) else json.dumps(value, default=str))


async def test_a_key_with_more_joins_than_a_row_held_is_exact_and_writes_small_rows(harness):
    moods = [{"name": "hot", "mood": f"m{t}", "event_time": t} for t in range(0, 10 * RECS, 1000)]
    recs = [
        {"consultant": "hot", "recommendation": f"r{i}", "event_time": 10 * i + 5}
        for i in range(RECS)
    ]
    await handle(harness.loop, [batch(settings.moods_topic, moods[1:], 0)])
    for i in range(0, RECS, BATCH):
        await handle(harness.loop, [batch(settings.events_topic, recs[i : i + BATCH], i)])
    before = len(harness.sent.changelog)
    # a late mood before every recommendation: every join that had no mood is corrected
    await handle(harness.loop, [batch(settings.moods_topic, moods[:1], len(moods))])

    final: dict[str, dict[str, Any]] = {}
    for r in harness.outputs(settings.output_topic):
        if r["id"] not in final or r["revision"] > final[r["id"]]["revision"]:
            final[r["id"]] = r
    exact = exact_mood_joins([Mood(**m) for m in moods], [Recommendation(**r) for r in recs])
    assert len(final) == RECS
    assert {jid: mood_answer(r) for jid, r in final.items()} == exact
    assert sum(1 for r in final.values() if r["revision"] == 2) == 100  # the late mood's share

    # the joins table's rows: one per join (and its index rows), whatever the key's count; the
    # mood history is a list of the key's moods (it grows with moods, not with joins)
    joins_topic = harness.tables.joins.changelog_topic.get_topic_name()
    rows = [(k, v) for t, _, k, v in harness.sent.changelog if t == joins_topic]
    assert len(rows) >= RECS
    largest = max(size(v) for _, v in rows)
    assert largest < 500, f"a joins row of {largest} bytes: it grows with the key"
    late = [v for t, _, _, v in harness.sent.changelog[before:] if t == joins_topic]
    assert len(late) >= 100 and max(size(v) for v in late) < 500


async def test_a_key_with_more_versions_than_a_row_held_is_exact_and_writes_small_rows(harness):
    """The dimension side: 6,000 moods of 200 characters were one 1.3 MB row (past the
    request limit: the worker exited on every restart). Each version is its own row now
    (``V`` rows): every changelog row stays small, and a late mood writes its own row, not
    the key's history; the answers are the oracle's."""
    moods = [
        {"name": "hot", "mood": f"{t:09d}" + "x" * 191, "event_time": t}
        for t in range(0, 6_000 * 10, 10)
    ]
    recs = [
        {"consultant": "hot", "recommendation": f"r{i}", "event_time": 95 * i + 7}
        for i in range(600)
    ]
    late = moods[1::10]  # a tenth of the moods come after the recommendations
    early = [m for m in moods if m not in late]
    await handle(harness.loop, [batch(settings.moods_topic, early, 0)])
    await handle(harness.loop, [batch(settings.events_topic, recs, 0)])
    before = len(harness.sent.changelog)
    await handle(harness.loop, [batch(settings.moods_topic, late, len(early))])

    final: dict[str, dict[str, Any]] = {}
    for r in harness.outputs(settings.output_topic):
        if r["id"] not in final or r["revision"] > final[r["id"]]["revision"]:
            final[r["id"]] = r
    exact = exact_mood_joins([Mood(**m) for m in moods], [Recommendation(**r) for r in recs])
    assert {jid: mood_answer(r) for jid, r in final.items()} == exact
    assert any(r["revision"] > 1 for r in final.values())  # the late moods corrected some
    largest = max(size(v) for *_, v in harness.sent.changelog)
    assert largest < 2_000, f"a changelog row of {largest} bytes: it grows with the key"
    written = [k for _, _, k, _ in harness.sent.changelog[before:] if k[:1] == b"V"]
    assert len(written) == len(late)  # the late moods' own rows, nothing else of the history

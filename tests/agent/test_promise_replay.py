"""A finality promise after a restart waits for the records the killed process handled.

The killed process handled a late mood (revision 2 of a join) and its changelog reached the
broker, its outputs did not; the new process gets the events again first (flow control lets an
input's records go once the wait for a lagging one times out) and moves the stream time past
the join's horizon. Had it promised then, the mood's re-send would come under the promise and be
dropped as already in the log: a fresh clone's ``tests/broker/test_finality_broker.py`` lost a
correction so (findings.md, 2026-12-06). The moods engine is given a promises topic here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from unittest import mock

import pytest

from app.agents.event_join import engines
from app.faust_app import app, settings

R = settings.retention_ms
FINAL = f"{settings.output_topic}-final"


@pytest.fixture
async def harness(join_harness: Any) -> AsyncIterator[Any]:
    engine = engines["moods"]
    with mock.patch.object(engine, "_final_topic", FINAL):
        async with join_harness("moods") as h:
            yield h


def event(jid: str, who: str, t: int) -> dict[str, Any]:
    return {"consultant": who, "recommendation": "tea", "event_time": t, "id": jid}


def restart(h: Any) -> None:
    """A fresh process: no memory of what was acked, handled or pending; a new generation."""
    h.loop.drop_waiting()
    for kept in (h.engine._pending, h.engine._ready, h.engine._mover):
        kept.clear()


async def test_a_promise_after_a_restart_waits_until_what_the_dead_process_handled_is_again(
    harness,
):
    h = harness
    # the first process: j answered with no mood (1), then a late mood corrects it (2)
    await h.event(event("j", "ann", 10_000), offset=100)
    await h.dimension({"name": "ann", "mood": "happy", "event_time": 9_000}, offset=200)
    assert [(r["revision"], r["mood"]) for r in h.outputs()] == [(1, None), (2, "happy")]
    # kill -9: the changelog has the mood's rows, the broker never had its outputs
    h.sent[:] = [s for s in h.sent if json.loads(s[2]).get("revision") != 2]
    restart(h)
    generation = (app.consumer_generation_id or 0) + 1
    with mock.patch.object(app, "consumer_generation_id", generation):
        # the events come again first and move the stream time a retention past j
        far = 10_000 + R + 5_000
        await h.event(event("j", "ann", 10_000), offset=100)
        await h.event(event("k", "bob", far), offset=101)
        await h.event(event("l", "bob", far + 1), offset=102)
        covering = [v for v in h.outputs(FINAL) if v["final_before"] > 10_000]
        assert not covering, "a promise covering j before the mood came again"
        # the mood comes again: late now; it re-sends what it made
        await h.dimension({"name": "ann", "mood": "happy", "event_time": 9_000}, offset=200)
        await h.event(event("m", "bob", far + 2), offset=103)
    sends = [(t, json.loads(v)) for t, _, v in h.sent if t in (settings.output_topic, FINAL)]
    revision_2 = next(
        i for i, (t, v) in enumerate(sends) if t != FINAL and v["id"] == "j" and v["revision"] == 2
    )
    assert sends[revision_2][1]["mood"] == "happy"
    promises = [(i, v["final_before"]) for i, (t, v) in enumerate(sends) if t == FINAL]
    assert promises, "the promise never came once the mood was delivered again"
    assert all(i > revision_2 for i, before in promises if before > 10_000)

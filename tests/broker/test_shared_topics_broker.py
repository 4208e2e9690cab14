"""One topic, several joins on a real broker, through a kill -9 (issue 58, item 2).

Two specs with the mood join's rules read the **same** event topic and the **same** dimension
topic in one worker: ``share-left`` answers every event at once (``left``), ``share-inner``
holds an event until a mood applies (``inner``). An out-of-order workload (moods up to 23 s
late) and one record neither can read are sent; the worker is killed -9 mid-stream, a fresh one
recovers. The partitions were committed up to what *both* joins had delivered
(app.compat.consumer), so nothing either join had not answered is lost, and what one of them had
answered beyond the other is read again as re-deliveries.

Read back from the topics: each output's latest answers are its oracle's (the mood join's exact
answer; for ``inner`` the events some mood applies to), no revision number of either carries two
answers or leaves a gap, the bad record is one dead letter per join, each naming it, and every
shared partition is committed to its end once both joins are done with it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from app.commands.sample_traffic import sample_moods_and_events
from app.joins.catalog import mood_spec
from app.settings import Settings
from tests.faults import check_revision_log, diff, send, uncommitted, wait_processed
from tests.harness import Names, create_topic, latest_by_id, read_all, wait_for
from tests.oracle import exact_mood_answer, mood_answer

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(12))
RETENTION_MS = 30_000  # above the workload's disorder (3 s + 20 s): nothing is late
PARTITIONS = 4  # ETJ_PARTITIONS of the tests


def spec(names: Names, name: str, **over: Any) -> dict[str, Any]:
    """The mood join's rules on the test's shared topics, with an output of its own."""
    raw = mood_spec(Settings())
    raw["events"] = {**raw["events"], "topic": f"{names.prefix}-recs"}
    raw["dimension"] = {**raw["dimension"], "topic": f"{names.prefix}-moods"}
    raw.pop("tables")
    return {
        **raw,
        "name": name,
        "output": f"{names.prefix}-{name}-out",
        "ticks": f"{names.prefix}-{name}-ticks",
        "retention_ms": RETENTION_MS,
        "review_lag_ms": None,
        **over,
    }


async def revisions(names: Names, topic: str) -> list[dict[str, Any]]:
    return [v for _, v in await read_all(names, topic, idle_s=1.0)]


async def test_two_joins_on_one_event_topic_and_one_dimension_topic_are_exact_through_a_kill(
    names, worker_factory, tmp_path
):
    left = spec(names, "share-left")
    inner = spec(names, "share-inner", mode="inner")
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([left, inner]))
    records = sample_moods_and_events(
        seed=58, count=200, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    expected = exact_mood_answer(records)
    expected_inner = {jid: a for jid, a in expected.items() if a[4] is not None}
    assert len(expected_inner) < len(expected), "the workload must hold some events in inner"
    recs, moods = left["events"]["topic"], left["dimension"]["topic"]
    for topic in (recs, moods):
        await create_topic(names, topic, PARTITIONS)
    first = worker_factory(names, name="first", joins_file=path).wait_ready()

    # 1. traffic flows to the shared topics, one event neither join can read among it; once a
    #    third is consumed (each join counts its own), kill -9 mid-stream
    sending = asyncio.create_task(
        send(
            names,
            [*records[:20], ("bad", "c1", b"{not json"), *records[20:]],
            pace_s=0.03,
            topics={"event": recs, "mood": moods, "bad": recs},
        )
    )
    await asyncio.to_thread(wait_processed, first, 2 * len(records) // 3)
    assert first.kill() == -9
    assert not sending.done(), "the kill must land while records are still being sent"
    sent = await sending
    # 2. a fresh process recovers both joins' tables and reads on from the committed offsets
    worker_factory(names, name="second", joins_file=path).wait_ready()

    want = {left["output"]: expected, inner["output"]: expected_inner}
    got: dict[str, dict[str, Any]] = {}

    async def both_exact() -> bool:
        for topic in want:
            latest = latest_by_id(await revisions(names, topic))
            got[topic] = {jid: mood_answer(r) for jid, r in latest.items()}
        return got == want

    assert await wait_for(both_exact, timeout_s=90, every_s=1), "; ".join(
        f"{topic}: {diff(got.get(topic, {}), w)}" for topic, w in want.items()
    )
    for topic in want:  # re-sends repeat a revision, never change one, leave no gap
        revs = await revisions(names, topic)
        check_revision_log(revs)
        assert len({r["id"] for r in revs}) == len(want[topic])
    assert any(r["revision"] > 1 for r in await revisions(names, left["output"])), (
        "the workload must have corrections"
    )

    # the bad record: one dead letter per join (a crash may repeat one), each naming its join
    bad = sent[20]
    letters = [v for _, v in await read_all(names, names.dead_letter_topic, idle_s=1.0)]
    assert {(d["join"], d["topic"], d["offset"]) for d in letters} == {
        ("share-left", recs, bad.offset),
        ("share-inner", recs, bad.offset),
    }
    # and both joins done with everything, every shared partition is committed to its end
    assert await uncommitted(names, sent) == {}

"""Duplicates on a real broker: the same input records delivered again (a producer retry, a
replayed batch) emit no new revision and count nothing twice."""

from __future__ import annotations

import asyncio
from typing import Any

from app.commands.sample_traffic import sample_moods_and_events
from tests.faults import (
    answers,
    check_accounting,
    check_counts,
    check_revision_log,
    diff,
    fates_of,
    revisions_of,
    send,
    settled_mood_history,
    wait_converged,
    worker_metrics,
)
from tests.harness import Worker, wait_for
from tests.oracle import exact_mood_answer

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(8))


def no_revision_without_change(revs: list[dict[str, Any]]) -> None:
    """Per join id, each new revision number answers differently from the one before it."""
    by_id: dict[str, dict[int, tuple[Any, ...]]] = {}
    for r in revs:
        by_id.setdefault(r["id"], {})[r["revision"]] = (r["mood"], r["mood_event_time"])
    for jid, numbered in by_id.items():
        ordered = [numbered[n] for n in sorted(numbered)]
        for before, after in zip(ordered, ordered[1:]):
            assert before != after, f"{jid}: a revision that changes nothing ({after})"


async def consumed(w: Worker, n: int) -> bool:
    m = worker_metrics(w)
    return sum(m.get("etj_records_in_total", {}).values()) >= n


async def test_every_record_twice_then_the_whole_batch_again_adds_nothing(names, worker_factory):
    records = sample_moods_and_events(
        seed=31, count=150, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    expected = exact_mood_answer(records)
    w = worker_factory(names).wait_ready()

    # 1. a producer that retries everything: each record twice in a row
    doubled = [r for r in records for _ in range(2)]
    sent = await send(names, doubled, pace_s=0.01)
    revs = await wait_converged(names, expected)
    assert answers(revs) == expected, diff(answers(revs), expected)
    assert await wait_for(lambda: consumed(w, len(doubled)), timeout_s=60)
    await asyncio.sleep(3)  # revisit ticks run meanwhile: they must not add anything either
    first = await revisions_of(names)
    check_revision_log(first)
    no_revision_without_change(first)
    check_counts(first, expected)

    # 2. the whole batch replayed once more, in the same order
    sent += await send(names, records, pace_s=0.01)
    assert await wait_for(lambda: consumed(w, len(doubled) + len(records)), timeout_s=90)
    await asyncio.sleep(3)
    again = await revisions_of(names)
    assert len(again) == len(first), "a replayed batch emitted new revisions"
    assert sorted(map(repr, again)) == sorted(map(repr, first))
    check_counts(again, expected)

    # 3. accounting: every copy is an accepted input (a duplicate changes nothing), none is lost
    check_accounting(
        sent,
        await fates_of(names),
        again,
        await settled_mood_history([w], sent),
        expect_dead=set(),
        expect_late=set(),
    )
    m = worker_metrics(w)
    assert sum(m["etj_records_in_total"].values()) == len(sent)
    assert sum(m.get("etj_dead_letters_total", {}).values()) == 0
    assert sum(m.get("etj_late_records_total", {}).values()) == 0
    assert sum(m["etj_revisions_total"].values()) == len(again)

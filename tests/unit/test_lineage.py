"""Lineage (docs/concepts/revision-log.md#lineage): a revision the rules hand back for a record
other than the one being handled (a re-emit, a join's current revision) carries the record that
made it; the batch twin's backfill names its archives."""

from __future__ import annotations

import pytest

from app.batch.jobs import backfill_source
from app.logic.event_join import (
    Event,
    JoinRules,
    KeyState,
    add_event,
    add_version,
    unsent_revisions,
)


@pytest.mark.unit
def test_re_emits_and_current_revisions_name_the_record_that_made_them():
    rules, ks = JoinRules(), KeyState()
    _, [first] = add_event(rules, ks, Event("c", "e", 10))
    assert first.source is None  # made by the record being handled: the agent names it
    j = ks.joins["e"]
    j.source = [0, 4]  # the engine's stamp: input 0 (events), offset 4
    _, [second] = add_version(rules, ks, "c", [5, "happy"])
    j.settle([1, 9], lambda src: False)  # made by input 1 (the dimension), offset 9
    again = unsent_revisions(rules, "e", "c", j, lambda src: False)
    assert [(r.revision, r.source) for r in again] == [(1, [0, 4]), (2, [1, 9])]
    assert rules.current("e", "c", j).source == [1, 9]


@pytest.mark.unit
def test_a_backfill_names_the_archives_it_read():
    # the source column the backfill adds to what it writes and publishes (jobs.with_lineage)
    assert backfill_source(["b/moods", "a/events", "b/moods"]) == {
        "backfill": ["a/events", "b/moods"]
    }

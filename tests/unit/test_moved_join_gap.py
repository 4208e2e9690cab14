"""A join moved in time by an event re-using its id keeps a revision a version made before the
move; after a kill -9, that version delivered again must find the join where it is now.

Found by tests/unit/test_crash_gaps.py's property test (2026-12-06): the version's duplicate
looked for the joins it made revisions of at or after its own time only (``before``), the join
had moved before it, and once the version was acked again its revision counted as delivered:
revisions 1, 3, 4, 5 of the join in the log, never 2 (findings.md).
"""

from __future__ import annotations

import pytest

from tests.unit.test_crash_gaps import EVENTS, MOODS, TICKS, Process, mood, rec, spec_of


@pytest.mark.unit
def test_a_version_delivered_again_re_sends_its_revision_of_a_join_that_moved_before_it():
    spec = spec_of(1000, None)
    first = Process(spec)
    b1 = [(TICKS, 0, None), (MOODS, 0, mood("a", 0, "m")), (MOODS, 1, mood("a", 0, "m"))]
    b2 = [
        (EVENTS, 0, rec("a", 1, "e0-a", "x")),  # revision 1: "m" (the mood at 0)
        (MOODS, 2, mood("a", 0, "n")),  # revision 2: "n" (ties at 0: the greatest)
        (EVENTS, 1, rec("a", 0, "e0-a", "x")),  # the same id at 0: revision 3, no mood before
    ]
    rows1, _, acks1 = first.batch(b1)
    rows2, outs2, _ = first.batch(b2)
    assert [r.revision for r in outs2 if not r.again] == [1, 2, 3]
    # kill -9: both batches' changelog rows in the broker, the second's outputs lost; the
    # commit covered the first batch
    committed = {t: end for t, (_, end) in acks1.items()}
    second = Process(spec, committed)
    second.recover(rows1 + rows2)
    log = []
    for batch in ([(MOODS, 2, b2[1][2])], [b2[0]], [b2[2]]):  # the mood first, acked
        _, outs, acks = second.batch(batch)
        log += outs
        second.ack(acks)
    assert sorted({r.revision for r in log if r.id == "e0-a"}) == [1, 2, 3, 4, 5]

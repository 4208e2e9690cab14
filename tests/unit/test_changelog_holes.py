"""A changelog record after a hole is not applied; the hole is read again (app.compat.changelog_holes)."""

from __future__ import annotations

import asyncio

from faust.types import TP

from app.compat import log_gaps
from app.compat.changelog_holes import RETRY_S, Holes

TP_A = TP("t-etj-mood-history-changelog", 2)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[Holes, list[tuple[TP, int]], Clock]:
    seeks: list[tuple[TP, int]] = []
    clock = Clock()

    async def seek(tp: TP, offset: int) -> None:
        seeks.append((tp, offset))

    return Holes(seek, clock=clock), seeks, clock


def follows(holes: Holes, applied: int | None, offset: int, tp: TP = TP_A) -> bool:
    return asyncio.run(holes.follows(tp, applied, offset))


def test_the_next_offset_and_a_first_record_follow_without_a_seek():
    holes, seeks, _ = make()
    assert follows(holes, None, 40)  # nothing applied yet: the partition starts there
    assert follows(holes, -1, 0)
    assert follows(holes, 6, 7)
    assert follows(holes, 7, 7)  # a record again (the caller skips it), not a hole
    assert seeks == [] and holes.rereads == 0


def test_a_record_after_dropped_ones_is_refused_and_the_hole_read_again():
    holes, seeks, _ = make()
    assert not follows(holes, -1, 64)  # the standby of the chaos test: 0..63 never came
    assert seeks == [(TP_A, 0)]
    # the records after the hole already on their way: skipped, no second seek
    assert not follows(holes, -1, 65)
    assert not follows(holes, -1, 66)
    assert seeks == [(TP_A, 0)] and holes.rereads == 1
    # the re-read arrives in order, and the requests are done with
    assert follows(holes, -1, 0)
    assert holes.pending == {}
    assert follows(holes, 63, 64)


def test_the_re_read_is_asked_again_when_it_does_not_come():
    holes, seeks, clock = make()
    assert not follows(holes, 82, 84)
    clock.now += RETRY_S - 0.1
    assert not follows(holes, 82, 85)
    assert seeks == [(TP_A, 83)]
    clock.now += 0.2
    assert not follows(holes, 82, 86)
    assert seeks == [(TP_A, 83), (TP_A, 83)] and holes.rereads == 2


def test_offsets_the_log_does_not_hold_are_no_hole():
    holes, seeks, _ = make()
    tp = TP("t-etj-compacted-changelog", 0)
    # aiokafka read past 5..9 (compaction, transaction markers): noted by app.compat.log_gaps
    log_gaps.note_skipped(tp, [(5, 10)])
    assert follows(holes, 4, 10, tp)
    assert seeks == []
    # ... but a jump over a noted range and records the log does hold is a hole
    log_gaps.note_skipped(tp, [(12, 14)])
    assert not follows(holes, 10, 15, tp)  # 11 and 14 are missing
    assert seeks == [(tp, 11)]


def test_a_seek_that_fails_is_asked_again_by_the_next_record_after_the_retry():
    clock = Clock()
    calls = []

    async def seek(tp: TP, offset: int) -> None:
        calls.append(offset)
        raise RuntimeError("no current assignment for partition")  # a rebalance meanwhile

    holes = Holes(seek, clock=clock)
    assert not asyncio.run(holes.follows(TP_A, 10, 13))  # refused, not raised
    clock.now += RETRY_S + 1
    assert not asyncio.run(holes.follows(TP_A, 10, 14))
    assert calls == [11, 11]


def test_offsets_before_the_log_start_are_no_hole():
    seeks = []

    async def seek(tp: TP, offset: int) -> None:
        seeks.append(offset)

    async def earliest(tp: TP) -> int:
        return 40  # retention deleted 0..39

    holes = Holes(seek, earliest, clock=Clock())
    assert asyncio.run(holes.follows(TP_A, -1, 40))
    assert not asyncio.run(holes.follows(TP_A, 40, 45))  # 41..44 are held: a hole
    assert seeks == [41]


def test_each_record_refused_for_a_hole_lowers_the_consumers_read_mark():
    # Faust's fetch loop drops a record at or below the last offset it handed out; records in
    # hand before the seek raise that mark past the hole, so the re-read would be dropped
    marks: dict[TP, int] = {TP_A: 0}

    async def seek(tp: TP, offset: int) -> None:
        marks[tp] = offset  # what Faust's seek_wait does

    def rewind(tp: TP, offset: int) -> None:
        marks[tp] = min(marks[tp], offset)

    holes = Holes(seek, rewind=rewind, clock=Clock())
    assert not asyncio.run(holes.follows(TP_A, 54, 109))
    marks[TP_A] = 110  # the loop handed out 110, fetched before the seek
    assert not asyncio.run(holes.follows(TP_A, 54, 110))
    assert marks[TP_A] == 55

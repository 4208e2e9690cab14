"""Faust counts an input offset as handled without handling it only when the log does not hold it.

Why: Faust's consumer (``Consumer._drain_messages``) takes any jump between the last offset it
read and the next record it is given for a gap in the log (a transaction marker, a compacted
record) and counts every offset in between as acked, and the record's own offset with them.
But a jump also appears when records the broker did return never reached that loop: a fetch
Faust cut at a generation change, records of a partition that was seeked meanwhile, a seek
back by :mod:`app.compat.stall_guard` while the loop still hands out what it fetched before.
Chaos run 21 lost 202 ratings that way: the ~200 offsets after offset 11877 of a ratings
partition were read past, counted as a gap, and committed as soon as 11877 (read again by the
stall guard) was handled; a rebalance seven seconds later dropped the re-read records from the
agent's buffer, and the next owner started after them. No error, no log line: answers missing
for good. (Why those records never reached Faust's read loop is not known; with this patch it
costs a re-read, not the records.)

The fix asks aiokafka, which knows: the offsets a fetch result moved past without returning a
record (``FetchResult.getall``: from the result's next offset before to its next offset after,
minus the offsets returned) are exactly the offsets the log does not hand out. Those are noted
per partition; a jump counts as a gap only where it covers noted offsets, never the record's
own offset. Every other offset stays unhandled, so the commit waits at it
(:mod:`app.compat.rebalance`) and the stall guard reads it again — and counts an offset at the
head of the commit as handled only once aiokafka has read past it (no more guessing from a
record that did not come back after one re-read).

Upstream: faust-streaming 0.15.3 (``Consumer._add_gap``, called from ``_drain_messages``),
aiokafka 0.14.0 (``FetchResult.getall``, ``PartitionRecords.next_fetch_offset``). Tests:
tests/unit/test_log_gaps.py (Faust's rule counts the unread range; this one does not).
Remove when Faust tells a gap in the log from records it dropped itself.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from typing import Any

from aiokafka.consumer.fetcher import FetchResult
from faust.transport.consumer import Consumer
from intervaltree import IntervalTree

log = logging.getLogger(__name__)

_original_getall = FetchResult.getall
_original_add_gap = Consumer._add_gap

#: tp -> offsets aiokafka read past without returning a record (facts about the log: they
#: stay true whoever reads the partition next). Written by the consumer thread, read by the
#: worker's loop.
_skipped: defaultdict[Any, IntervalTree] = defaultdict(IntervalTree)
_lock = threading.Lock()


def skipped_ranges(start: int, end: int, offsets: list[int]) -> list[tuple[int, int]]:
    """The ranges ``[a, b)`` of ``[start, end)`` holding none of ``offsets`` (ascending)."""
    out, at = [], start
    for offset in offsets:
        if offset > at:
            out.append((at, offset))
        at = max(at, offset + 1)
    if end > at:
        out.append((at, end))
    return out


def note_skipped(tp: Any, ranges: list[tuple[int, int]]) -> None:
    """Note offsets of ``tp`` the log does not hold."""
    with _lock:
        tree = _skipped[tp]
        for a, b in ranges:
            tree.addi(a, b)
        tree.merge_overlaps()


def skipped_within(tp: Any, start: int, end: int) -> list[tuple[int, int]]:
    """The noted ranges of ``tp`` within ``[start, end)``."""
    with _lock:
        tree = _skipped.get(tp)
        if not tree:
            return []
        return sorted((max(i.begin, start), min(i.end, end)) for i in tree.overlap(start, end))


def absent_until(tp: Any, offset: int) -> int | None:
    """If the log does not hold ``offset`` of ``tp``: the end of that run of absent offsets."""
    with _lock:
        tree = _skipped.get(tp)
        hits = tree.at(offset) if tree else ()
        return max(i.end for i in hits) if hits else None


def count_if_absent(consumer: Any, tp: Any, offset: int) -> int | None:
    """If the log does not hold ``offset`` of ``tp``, count its run of absent offsets as a gap
    (acked, in Faust's ``consumer._gap``) and return the run's end; else None. For the offset
    at the head of the commit, which Faust's gap rule never sees (nothing was read before it)."""
    end = absent_until(tp, offset)
    if end is not None:
        consumer._gap[tp].addi(offset, end)
    return end


def forget_before(tp: Any, offset: int | None) -> None:
    """Drop what is noted of ``tp`` below ``offset`` (committed: never asked about again)."""
    if offset is None:
        return
    with _lock:
        tree = _skipped.get(tp)
        if tree:
            tree.chop(0, offset)
            if not tree:
                del _skipped[tp]


def getall(self: FetchResult, max_records: int | None = None) -> list[Any]:
    """aiokafka's ``FetchResult.getall``, noting the offsets it moved past with no record."""
    records = self._partition_records
    start = records.next_fetch_offset if records is not None else None
    out = _original_getall(self, max_records)
    if start is not None:
        end = records.next_fetch_offset
        if end > start + len(out):  # something was read past: a marker, compaction, an abort
            note_skipped(self._topic_partition, skipped_ranges(start, end,
                                                              [r.offset for r in out]))
    return out


async def add_gap(self: Consumer, tp: Any, offset_from: int, offset_to: int) -> None:
    """Faust's gap rule, for the offsets the log does not hold only: of ``offset_from`` up to
    the record at ``offset_to`` (delivered now, acked when handled), count as acked the offsets
    aiokafka read past; leave the rest unhandled (read again, :mod:`app.compat.stall_guard`)."""
    committed = self._committed_offset[tp]
    forget_before(tp, committed)
    start = max(offset_from, committed) if committed is not None else offset_from
    counted = skipped_within(tp, start, offset_to)
    if counted:
        gaps = self._gap[tp]
        for a, b in counted:
            gaps.addi(a, b)
        await asyncio.sleep(0)  # as Faust: let health checks run while the tree is merged
        gaps.merge_overlaps()
    missing = offset_to - start - sum(b - a for a, b in counted)
    if missing > 0:
        log.info("input %s[%s]: %d offsets between %d and %d were read but not handed to the "
                 "agent; not counted as handled (the commit waits for them)", tp.topic,
                 tp.partition, missing, start, offset_to - 1)


def install() -> None:
    FetchResult.getall = getall  # type: ignore[method-assign]
    Consumer._add_gap = add_gap  # type: ignore[method-assign]

"""aiokafka notes the offsets the log does not hold, so that a hand-over and a commit may pass
those offsets — and only those — without a record.

Why: a jump between two records of a partition is either a gap in the log (a transaction
marker, a compacted record, an aborted transaction) or records that were read and never handed
over. Faust took every jump for a gap (``Consumer._add_gap``): chaos run 21 lost 202 ratings
that way (the offsets after 11877 of a ratings partition were read past, counted as a gap and
committed; no error, answers missing for good).

aiokafka knows the difference: the offsets a fetch result moved past without returning a
record (``FetchResult.getall``: from the result's next offset before to its next offset after,
minus the offsets returned) are exactly the offsets the log does not hand out. Those are noted
per partition (:func:`skipped_within`). The hand-over (:mod:`app.compat.consumer`) accepts a
batch that starts after the last one only across noted offsets, and an acked range extends the
commit only across them; every other jump is read again.

Upstream: aiokafka 0.14.0 (``FetchResult.getall``, ``PartitionRecords.next_fetch_offset``).
Tests: tests/unit/test_log_gaps.py. Remove when aiokafka reports the offsets it reads past.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Any

from aiokafka.consumer.fetcher import FetchResult
from intervaltree import IntervalTree

log = logging.getLogger(__name__)

_original_getall = FetchResult.getall

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


def install() -> None:
    FetchResult.getall = getall  # type: ignore[method-assign]

"""aiokafka's fetcher (``aiokafka.consumer.fetcher.FetchResult``): the offsets the log does not
hold are noted, so that a hand-over and a commit may pass those offsets — and only those —
without a record.

A jump between two records of a partition is either a gap in the log (a transaction marker, a
compacted record, an aborted transaction) or records that were read and never handed over;
aiokafka knows which, and :func:`getall` (a monkeypatch: see its docstring) notes it per
partition (:func:`skipped_within`). The hand-over (:mod:`app.compat.consumer`) accepts a batch
that starts after the last one only across noted offsets, and an acked range extends the commit
only across them; every other jump is read again.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Any

from aiokafka.consumer.fetcher import FetchResult
from intervaltree import IntervalTree

from app.compat.upstream import replaces

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


@replaces("aiokafka.consumer.fetcher:FetchResult.getall", "b638929de343")
def getall(self: FetchResult, max_records: int | None = None) -> list[Any]:
    """aiokafka's ``FetchResult.getall``, noting the offsets it moved past with no record.

    Upstream: aiokafka reads past offsets the log does not hold (transaction markers, compacted
    or aborted records) without saying so, and Faust took every jump between two records of a
    partition for such a gap (``Consumer._add_gap``).

    Symptom: chaos run 21 lost 202 ratings: offsets after 11877 of a ratings partition were read
    past, counted as a gap and committed; no error, answers missing for good.

    Here the offsets a fetch result moved past without returning a record (from its next
    offset before to its next offset after, minus those returned) are noted per partition
    (:func:`skipped_within`); the hand-over and the commit pass only those. A real
    monkeypatch: aiokafka's fetcher builds its ``FetchResult`` objects itself, no hook names
    the class.

    Test: tests/unit/test_log_gaps.py::test_a_fetch_notes_the_offsets_the_log_does_not_hold

    Remove when: aiokafka reports the offsets it reads past.
    """
    records = self._partition_records
    start = records.next_fetch_offset if records is not None else None
    out = _original_getall(self, max_records)
    if start is not None:
        end = records.next_fetch_offset
        if end > start + len(out):  # something was read past: a marker, compaction, an abort
            note_skipped(self._topic_partition, skipped_ranges(start, end, [r.offset for r in out]))
    return out


def install() -> None:
    FetchResult.getall = getall

"""A changelog partition is applied without a hole: records the consumer dropped are read again.

Why: a table store's persisted offset says "every changelog record up to here is applied";
recovery and standby replicas start from it, and a standby promoted to active trusts it. Faust's
recovery loop (``Recovery._slurp_changelogs``, replaced by :mod:`app.compat.recovery`)
applies whatever record comes next and moves the offset to it, so a record the consumer fetched
and never handed over leaves a hole that nothing reads again. Faust's consumer does drop fetched
records: ``Consumer.getmany`` skips the records of a partition that is paused when it hands
them out, and aiokafka has already moved its position past them (the incident:
findings.md, "A standby that skipped the start of its changelog").

Here every record is checked against the last one applied of its partition. A jump is fine where the
log itself holds no records (aiokafka read past them: compaction, transaction markers, noted by
:mod:`app.compat.log_gaps`; or they are before the log's start offset); otherwise the record is not
applied and the partition is read again from the first missing offset. The records after the hole
that are already on their way are skipped as well; they come again after the re-read. Faust's
consumer also drops a record at or below the last offset it handed out (``Consumer._read_offset``,
which the seek sets to the first missing offset): the records after the hole that its fetch loop
still had in hand when the seek was made raise that mark again, and the re-read would be dropped as
"read already" (seen in the first chaos runs with the fix: two tables of a partition waited for
their re-read until the next rebalance). So each record refused for a hole puts the mark back to the
first missing offset. If the re-read does not come within :data:`RETRY_S` while later records do, it
is requested again. A rebalance seeks every changelog partition to its applied offset anyway, so
nothing is left waiting.

While recovery waits for the records up to a partition's high water and none comes for upstream's
5 s, the last ones may have been dropped with nothing after them to show it: they are read
again too (:meth:`Holes.idle`), instead of a recovery that waits for ever.

Upstream: faust-streaming 0.15.3 (``Recovery._slurp_changelogs``, ``Consumer.getmany``,
``AIOKafkaConsumerThread._fetch_records``), aiokafka 0.14.0 (``Fetcher.fetched_records``).
Tests: tests/unit/test_changelog_holes.py (the rule), tests/unit/test_recovery.py (the
recovery loop refuses a record after a hole and applies the re-read); the 2-minute chaos test.
Remove when Faust's consumer hands every fetched record to recovery, or seeks back what it drops
(:mod:`app.compat.consumer_thread` removes the drop found here; a partition paused between
aiokafka's hand-over and Faust's can still lose records).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from time import monotonic
from typing import Any

from app.compat import log_gaps

__all__ = ["Holes", "RETRY_S"]

log = logging.getLogger(__name__)

#: seconds to wait for a requested re-read before asking again (later records keep coming)
RETRY_S = 5.0

#: (tp, offset) -> seek the consumer's fetch position of ``tp`` to ``offset``
Seek = Callable[[Any, int], Awaitable[None]]
#: tp -> the first offset the log holds (retention may have deleted those before it)
Earliest = Callable[[Any], Awaitable[int]]
#: (tp, offset) -> let the consumer hand out ``tp``'s records from ``offset`` again (Faust's
#: consumer drops a record at or below the last offset it handed out)
Rewind = Callable[[Any, int], None]


class Holes:
    """The re-reads requested for the changelog partitions of one recovery loop."""

    def __init__(
        self,
        seek: Seek,
        earliest: Earliest | None = None,
        rewind: Rewind | None = None,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self._seek = seek
        self._earliest = earliest
        self._rewind = rewind
        self._clock = clock
        #: tp -> (first missing offset, when its re-read was requested)
        self.pending: dict[Any, tuple[int, float]] = {}
        #: re-reads requested (a count for tests and logs)
        self.rereads = 0

    async def follows(self, tp: Any, applied: int | None, offset: int) -> bool:
        """May the record at ``offset`` of ``tp`` be applied after ``applied`` (the last offset
        applied, None: nothing yet, the record starts the partition)? False: a record between
        them was dropped, and a re-read from the first missing one is requested."""
        if applied is None or offset <= applied + 1:
            if self.pending:
                self.pending.pop(tp, None)
            return True
        first = applied + 1
        if self._asked(tp, first, self._clock()):
            self._lower_mark(tp, first)  # the re-read is on its way; this record comes again
            return False
        start = first
        if self._earliest is not None:  # below the log's start, nothing is held any more
            try:
                start = max(first, await self._earliest(tp))
            except Exception as exc:
                log.info("changelog %s[%s]: no earliest offset (%r)", tp.topic, tp.partition, exc)
        absent = sum(b - a for a, b in log_gaps.skipped_within(tp, start, offset))
        if absent >= offset - start:  # the log holds nothing in between
            log_gaps.forget_before(tp, offset)
            self.pending.pop(tp, None)
            return True
        await self._reread(
            tp,
            first,
            f"offsets {first}..{offset - 1} never reached the table (next record: {offset})",
        )
        self._lower_mark(tp, first)
        return False

    def _lower_mark(self, tp: Any, first: int) -> None:
        """A record after the hole, in the fetch loop's hands before the seek, raised the
        consumer's read mark past the hole: put it back, or the re-read is dropped as read."""
        if self._rewind is not None:
            self._rewind(tp, first)

    async def idle(self, tp: Any, applied: int) -> None:
        """Recovery of ``tp`` waits for records after ``applied`` and none came for a while:
        the last ones may have been dropped with nothing after them to show the hole (a
        recovery would wait for them for ever), so read them again."""
        await self._reread(
            tp, applied + 1, f"no record after {applied} came while recovery waits for more"
        )

    def _asked(self, tp: Any, first: int, now: float) -> bool:
        """Was a re-read of ``tp`` from ``first`` requested less than :data:`RETRY_S` ago?"""
        asked = self.pending.get(tp)
        return asked is not None and asked[0] == first and now - asked[1] < RETRY_S

    async def _reread(self, tp: Any, first: int, why: str) -> None:
        now = self._clock()
        if self._asked(tp, first, now):
            return  # the re-read is on its way
        self.pending[tp] = (first, now)
        self.rereads += 1
        log.warning(
            "changelog %s[%s]: %s; reading again from %d", tp.topic, tp.partition, why, first
        )
        try:
            await self._seek(tp, first)
        except Exception as exc:
            log.warning(
                "changelog %s[%s]: the re-read from %d was not started (%r); the next "
                "rebalance or record asks again",
                tp.topic,
                tp.partition,
                first,
                exc,
            )

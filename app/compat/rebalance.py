"""Three fixes to Faust's consumer around a rebalance: no input record is committed unhandled.

Found by the two-worker kill tests (tests/broker/test_faults_kill.py), traced with per-record logs: the
survivor committed offsets of records its agent was never handed (a mood missing from the
history, a recommendation with no revision). Three Faust behaviours add up to that loss:

1. ``Recovery.on_recovery_completed`` resumes the input partitions *before* it seeks them to
   their committed offsets. Records fetched in between are delivered from wherever the fetch
   position was, then the seek resets the consumer's "last read" offset under them.
2. aiokafka's ``seek_to_committed`` seeks only to offsets > 0, so a partition with no committed
   offset keeps its old position (past records the previous generation fetched but never got
   to its agent).
3. ``Consumer._new_offset`` takes the committed offset (the *next* offset to read) for the last
   one handled: when offset ``c`` was never acked but ``c + 1`` was, it commits past ``c``. And
   a record arriving two ahead of the reset "last read" offset makes Faust's gap logic (meant
   for compacted topics and transaction markers) count the offset in between as acked (that
   gap logic now counts only offsets the log does not hold: :mod:`app.compat.log_gaps`).

Fixes: seek first, then resume (1); a partition with no committed offset is read from its
beginning (2); a commit never passes the first unhandled offset unless it was acked or the
log does not hold it (3: a transaction marker, compaction, as :mod:`app.compat.log_gaps` learns
from aiokafka). A record the consumer drops stops the commit instead of vanishing;
:mod:`app.compat.stall_guard` then reads it again.

Upstream: faust-streaming 0.15.3 (``faust/tables/recovery.py``, ``faust/transport/consumer.py``),
aiokafka 0.14.0 (``AIOKafkaConsumer.seek_to_committed``). Tests: tests/unit/test_rebalance_fixes.py
(fix 3, pure), tests/broker/test_faults_kill.py (all three; about one run in four loses a record
without them). Remove each when Faust seeks before it resumes, seeks uncommitted partitions to
the start, and commits only past acked offsets.
"""

from __future__ import annotations

from typing import Any

from faust.tables.recovery import Recovery
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from app.compat import log_gaps

_original_on_recovery_completed = Recovery.on_recovery_completed


async def _already_seeked() -> None:
    return None


async def on_recovery_completed(self: Recovery, generation_id: int = 0) -> None:
    """Faust's ``Recovery.on_recovery_completed``, with its seek done first (fix 1): the input
    partitions are still paused, so nothing is fetched from a stale position."""
    consumer = self.app.consumer
    if consumer.assignment() and self.app.consumer_generation_id == generation_id:
        self.log.info("Seek stream partitions to committed offsets (before resuming them).")
        await self._wait(consumer.perform_seek(),
                         timeout=self.app.conf.broker_request_timeout)
        consumer.perform_seek = _already_seeked  # type: ignore[method-assign]
    try:
        await _original_on_recovery_completed(self, generation_id)
    finally:
        consumer.__dict__.pop("perform_seek", None)


def is_input(app: Any, tp: Any) -> bool:
    """An input partition of the agents: not a table changelog, not Faust's leader topic."""
    return tp.topic not in app.tables.changelog_topics and "__assignor" not in tp.topic


async def seek_to_committed(self: AIOKafkaConsumerThread) -> dict[Any, Any]:
    """Seek every assigned input partition to its committed offset, or to offset 0 when it has
    none (fix 2: below the log start, the consumer's reset policy takes it to the earliest);
    changelog partitions are left to the table recovery."""
    consumer = self._ensure_consumer()
    app = self.app

    async def seek() -> dict[Any, Any]:
        tps = [tp for tp in consumer.assignment() if is_input(app, tp)]
        committed = await consumer.seek_to_committed(*tps) if tps else {}
        for tp, offset in committed.items():
            if not offset or offset <= 0:
                consumer.seek(tp, 0)
        return committed

    return await self.call_thread(seek)


def first_unhandled(consumer: Consumer, tp: Any) -> int | None:
    """The offset the next commit of ``tp`` starts at: the committed one (None: none yet)."""
    return consumer._committed_offset.get(tp)


def _new_offset(self: Consumer, tp: Any) -> int | None:
    """The offset to commit for ``tp``: one past the run of acked offsets that starts at the
    committed one, None if that offset itself is not acked yet (fix 3)."""
    acked = self._acked[tp]
    if not acked:
        return None
    committed = first_unhandled(self, tp)
    if committed is not None:
        log_gaps.count_if_absent(self, tp, committed)  # the log may not hold it
    gaps = self._gap[tp]
    if gaps:  # real gaps (compaction, transaction markers) count as acked, as in Faust
        top = max(acked)
        for interval in sorted(gaps.overlap(0, top), key=lambda i: i.begin):
            acked.extend(range(interval.begin, interval.end))
        gaps.chop(0, top + 1)
    acked.sort()
    if committed is not None and acked[0] > committed:
        return None  # offset `committed` was not handled: wait for it
    run = 1
    while run < len(acked) and acked[run] <= acked[run - 1] + 1:
        run += 1
    done = acked[:run]
    del acked[:run]
    self._acked_index[tp].difference_update(done)
    return done[-1] + 1


def install() -> None:
    Recovery.on_recovery_completed = on_recovery_completed  # type: ignore[method-assign]
    AIOKafkaConsumerThread.seek_to_committed = seek_to_committed  # type: ignore[method-assign]
    Consumer._new_offset = _new_offset  # type: ignore[method-assign]

"""Faust's table recovery (``faust.tables.recovery.Recovery``): etj's subclass.

Recovery replays each changelog partition into its table before the agents start, and keeps
standby partitions up to date. etj changes three of its methods; :class:`EtjRecovery` is the
recovery of etj's table manager (:mod:`app.compat.table_manager`), so upstream's class is left
as it is. The hole rule it applies lives in :mod:`app.compat.changelog_holes`.
"""

from __future__ import annotations

import asyncio
import logging
from time import monotonic
from typing import Any, cast

from faust.tables.recovery import Recovery
from faust.transport.consumer import Consumer
from faust.utils.tracing import finish_span
from mode.services import ServiceTask

from app import runtime
from app.compat.changelog_holes import Holes
from app.compat.upstream import replaces

__all__ = ["EtjRecovery", "slurp_changelogs"]

log = logging.getLogger("faust.tables.recovery")

#: most changelog records taken from the queue at once
MAX_BATCH = 10_000
#: longest wait between two end-of-recovery checks while records flow (a partition reaching its
#: high water is checked at once; an idle queue is checked by upstream's 5 s timeout)
CHECK_EVERY_S = 0.25
#: upstream's wait for a changelog record before the loop looks whether recovery is over (and
#: whether the records it waits for were dropped: app.compat.changelog_holes)
IDLE_S = 5.0


async def _already_seeked() -> None:
    return None


@replaces("faust.tables.recovery:Recovery._slurp_changelogs", "7e3120dad754")
async def slurp_changelogs(self: Recovery) -> None:
    """Recovery applies changelog records in batches, not one loop turn each, and never past a
    hole.

    Upstream: Faust's recovery loop (``Recovery._slurp_changelogs``) ``await``s
    ``asyncio.wait_for(queue.get(), 5.0)`` for every changelog record (a task and a timer per
    record), then asks ``need_recovery()`` — a Counter over every assigned changelog partition
    — and the standby bookkeeping, per record; and it applies whatever record comes next.

    Symptom: a worker replaying a 1M-key changelog spent most of its main thread there while
    its consumer thread idled (~7,000-9,000 keys/s; ``python -m bench.profile_worker
    --recovery``), and the full changelog queue made the fetch loop take its slow path for
    each record. And a record the consumer dropped left a hole nothing read again
    (:mod:`app.compat.changelog_holes`, which says how).

    Here the loop waits (upstream's 5 s) for one record, then takes every record already
    queued (up to :data:`MAX_BATCH`), handles each exactly as upstream does (offsets, per-table
    buffers, ``apply_changelog_batch`` at the buffer size) and checks for the end of recovery
    and the standbys — O(assigned partitions) — only after a batch in which a partition
    reached its high water (the only event that can end recovery) and otherwise every
    :data:`CHECK_EVERY_S`. Same records, order, tables and offsets. One check is added: a
    record whose offset jumps past the last one applied is applied only if the log holds
    nothing in between; otherwise the partition is read again from the hole. Upstream's ``XXX
    bug`` (a record of a partition neither active nor standby applied to the previous record's
    table) is not reproduced: it is skipped with the same warning.

    Test: tests/unit/test_recovery.py::test_a_record_after_a_hole_waits_for_the_re_read
    (and every broker test recovers through it; bench ``recovery_s_1m_keys`` times it).

    Remove when: Faust's recovery consumes its queue in batches and seeks back what its
    consumer drops.
    """
    changelog_queue = self.tables.changelog_queue
    tp_to_table = self.tp_to_table
    active_tps = self.active_tps
    standby_tps = self.standby_tps
    active_offsets = self.active_offsets
    standby_offsets = self.standby_offsets
    active_highwaters = self.active_highwaters
    standby_highwaters = self.standby_highwaters
    active_events_received_at = self._active_events_received_at
    standby_events_received_at = self._standby_events_received_at
    buffers = self.buffers
    buffer_sizes = self.buffer_sizes
    processing_times = self._processing_times

    # a record after a hole is not applied; the hole is read again (app.compat.changelog_holes)
    async def earliest(tp: Any) -> int:
        return (await self.app.consumer.earliest_offsets(tp))[tp]

    def rewind(tp: Any, offset: int) -> None:
        # Faust drops records at or below it (its Consumer's, not in the ConsumerT interface)
        read = cast(Consumer, self.app.consumer)._read_offset
        mark = read.get(tp)
        if mark is not None and mark > offset:
            read[tp] = offset

    holes = Holes(lambda tp, offset: self.app.consumer.seek_wait({tp: offset}), earliest, rewind)

    async def maybe_signal_recovery_end(timeout: bool = False, timeout_count: int = 0) -> None:
        if timeout and self.app.in_transaction and timeout_count > 1:
            await detect_aborted_tx()
        if self.in_recovery and not self.need_recovery():
            self.flush_buffers()  # apply anything stuck in the buffers
            self._set_recovery_ended()
            if self._actives_span is not None:
                self._actives_span.set_tag("Actives-Ready", True)
            self.signal_recovery_end.set()

    async def detect_aborted_tx() -> None:  # upstream's, for transactional apps
        highwaters, offsets = self.active_highwaters, self.active_offsets
        for tp, highwater in highwaters.items():
            if highwater is not None and offsets[tp] is not None and offsets[tp] < highwater:
                position = await self.app.consumer.position(tp)
                if position is not None and position >= highwater:
                    offsets[tp] = highwater

    async def apply(event: Any, now: float) -> bool:
        """Upstream's handling of one record; True if its partition reached its high water."""
        message = event.message
        tp, offset = message.tp, message.offset
        is_active = tp in active_tps
        if is_active:
            table = tp_to_table[tp]
            offsets = active_offsets
            bufsize = buffer_sizes.get(tp)
            if bufsize is None:
                bufsize = buffer_sizes[tp] = table.recovery_buffer_size
            active_events_received_at[tp] = now
        elif tp in standby_tps:
            table = tp_to_table[tp]
            offsets = standby_offsets
            bufsize = buffer_sizes.get(tp)
            if bufsize is None:
                bufsize = buffer_sizes[tp] = table.standby_buffer_size
                standby_events_received_at[tp] = now
        else:
            log.warning("recovery unknown topic %s offset %s", tp, offset)
            return False
        seen_offset = offsets.get(tp, None)
        if (
            seen_offset is not None
            and offset > seen_offset + 1
            and not await holes.follows(tp, seen_offset, offset)
        ):
            return False
        if seen_offset is None or offset > seen_offset:
            offsets[tp] = offset
            buf = buffers[table]
            buf.append(event)
            await table.on_changelog_event(event)
            if len(buf) >= bufsize:
                table.apply_changelog_batch(buf)
                buf.clear()
                self._last_flush_at = now
            if is_active:
                now_after = monotonic()
                last_processed_at = self._last_active_event_processed_at
                if last_processed_at is not None:
                    processing_times.append(now_after - last_processed_at)
                    if len(processing_times) > self.num_samples_required_for_estimate:
                        processing_times.popleft()
                self._last_active_event_processed_at = now_after
            highwater = (active_highwaters if is_active else standby_highwaters).get(tp)
            return highwater is not None and offset >= highwater
        return False

    timeout_count = 0
    checked_at = 0.0
    while not self.should_stop:
        try:
            self.signal_recovery_end.clear()
            try:
                event = await asyncio.wait_for(changelog_queue.get(), timeout=IDLE_S)
            except TimeoutError:
                timeout_count += 1
                if self.should_stop:
                    return
                if self.in_recovery:  # still waiting: the last records may have been dropped
                    for tp in active_tps:
                        applied, highwater = active_offsets.get(tp), active_highwaters.get(tp)
                        if applied is not None and highwater is not None and applied < highwater:
                            await holes.idle(tp, applied)
                await maybe_signal_recovery_end(timeout=True, timeout_count=timeout_count)
                continue
            timeout_count = 0
            now = monotonic()
            batch = [event]
            while len(batch) < MAX_BATCH and not changelog_queue.empty():
                batch.append(changelog_queue.get_nowait())
            reached = False
            for event in batch:
                reached = await apply(event, now) or reached
            # the end checks cost O(assigned partitions); a batch is often a few records, so
            # check when a partition just reached its high water (the only way the answer
            # turns) and otherwise at most every CHECK_EVERY_S
            if not reached and now - checked_at < CHECK_EVERY_S:
                continue
            checked_at = now
            await maybe_signal_recovery_end()
            standby_ready = self._standbys_span is None and self.tables.standbys_ready
            if not standby_ready and not self.standby_remaining_total():
                if self._standbys_span:
                    finish_span(self._standbys_span)
                    self._standbys_span = None
                self.tables.on_standbys_ready()
        except Exception as exc:
            log.warning("Error in recovery %r", exc)


class EtjRecovery(Recovery):
    """Faust's recovery with etj's three changes (module doc)."""

    #: a service task, found by name when the service starts (mode collects the class's
    #: ``ServiceTask`` attributes, the subclass's replacing upstream's)
    _slurp_changelogs = ServiceTask(slurp_changelogs)

    @replaces("faust.tables.recovery:Recovery.on_recovery_completed", "895e7c415a4d")
    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        """Input partitions are seeked to their committed offsets *before* they are resumed.

        Upstream: ``Recovery.on_recovery_completed`` resumes the input partitions, then seeks
        them to their committed offsets.

        Symptom: records fetched in between were delivered from wherever the fetch position
        was, then the seek reset the position under them: the survivor of the two-worker kill
        tests committed offsets of records its agent was never handed (about one run in four).

        Here the seek is done first, while the partitions are still paused; upstream's own
        seek is then a no-op.

        Test: tests/broker/test_faults_kill.py::test_two_workers_one_killed_then_it_comes_back_is_exact

        Remove when: Faust seeks before it resumes.
        """
        consumer = self.app.consumer
        if consumer.assignment() and self.app.consumer_generation_id == generation_id:
            self.log.info("Seek stream partitions to committed offsets (before resuming them).")
            await self._wait(consumer.perform_seek(), timeout=self.app.conf.broker_request_timeout)
            consumer.perform_seek = _already_seeked  # type: ignore[method-assign]  # upstream's seek made a no-op on this instance until recovery completes (popped below)
        try:
            await Recovery.on_recovery_completed(self, generation_id)
        finally:
            consumer.__dict__.pop("perform_seek", None)
        # not part of the patch: the recovered tables are long-lived, the collector need not
        # traverse them again (app.runtime.freeze_long_lived)
        runtime.freeze_long_lived()

    @replaces("faust.tables.recovery:Recovery._seek_offsets", "d76d5a8f46fa")
    async def _seek_offsets(self, consumer: Any, tps: Any, offsets: Any, title: str) -> None:
        """A changelog partition with nothing applied yet is read from its start, not refused.

        Upstream: ``_build_offsets`` replaces a partition's ``None`` offset (nothing persisted)
        by ``-1`` only for the partitions assigned when it runs; ``_seek_offsets`` turns ``-1``
        into 0. A standby partition added by a rebalance during recovery reaches
        ``_seek_offsets`` still ``None``.

        Symptom: aiokafka's ``seek`` refuses it (``ValueError: Offset must be a positive
        integer``), the recovery service crashes and the worker exits 1 (chaos runs 19 and 20,
        right after "Recovery complete", once a crashed worker's volume was discarded).

        Here an offset that is ``None`` (or below -1) becomes ``-1``, Faust's own "nothing
        applied", before upstream's seek.

        Test: tests/unit/test_standby_offsets.py::test_a_partition_added_with_no_offset_is_read_from_its_start

        Remove when: Faust's ``_seek_offsets`` handles ``None``.
        """
        for tp in tps:
            offset = offsets.get(tp)
            if offset is None or offset < -1:
                offsets[tp] = -1  # nothing applied: from the start
        await Recovery._seek_offsets(self, consumer, tps, offsets, title)

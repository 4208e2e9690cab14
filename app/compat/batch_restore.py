"""Apply changelog records to the tables in batches during recovery, not one loop turn each.

Upstream (faust-streaming 0.15.3, ``faust.tables.recovery.Recovery._slurp_changelogs``): for
every changelog record the recovery loop ``await``s ``asyncio.wait_for(queue.get(), 5.0)`` (a
task and a timer per record), then, after buffering it, asks ``need_recovery()`` — a Counter
over every assigned changelog partition — and the standby bookkeeping, per record. Symptom:
a worker replaying a 1M-key changelog spent most of its main thread there while its consumer
thread idled (~7,000-9,000 keys/s; ``python -m bench.profile_worker --recovery``), and the
changelog queue, full, made the fetch loop fall back to its slow path for each record.

Here the loop waits (with upstream's 5 s timeout) for one record, then takes every record already
queued (up to :data:`MAX_BATCH`) with ``get_nowait``, handles each exactly as upstream does
(offset bookkeeping, per-table buffer, ``apply_changelog_batch`` at the table's buffer size) and
then checks for the end of recovery and the standbys — O(assigned partitions) each, 11 % of
the main thread in a 1M-key replay when run after every batch, as batches are often a few
records — only after a batch in which a partition reached its high water (the only event that
can end recovery or make the standbys ready) and otherwise every :data:`CHECK_EVERY_S`.
Records are applied in the same order, to the same tables, with the same offsets: only the
per-record overhead goes. One check is added: a record whose offset jumps past the last one
applied of its partition is applied only if the log holds nothing in between; otherwise the
partition is read again from the hole (:mod:`app.compat.changelog_holes`, which says why).
Upstream's ``XXX bug`` (a record of a partition neither active nor standby applied to the
previous record's table) is not reproduced: such a record is skipped with the same warning.

Tests: every broker test recovers tables through it (kill -9 and restart, rebalances, the
two-worker tests: exact), and bench ``recovery_s_1m_keys`` measures it. Remove when Faust's
recovery consumes its queue in batches.
"""

from __future__ import annotations

import asyncio
import logging
from time import monotonic
from typing import Any

from faust.tables.recovery import Recovery
from faust.utils.tracing import finish_span
from mode.services import ServiceTask

from app.compat.changelog_holes import Holes

__all__ = ["install"]

log = logging.getLogger("faust.tables.recovery")

#: most changelog records taken from the queue at once
MAX_BATCH = 10_000
#: longest wait between two end-of-recovery checks while records flow (a partition reaching its
#: high water is checked at once; an idle queue is checked by upstream's 5 s timeout)
CHECK_EVERY_S = 0.25
#: upstream's wait for a changelog record before the loop looks whether recovery is over (and
#: whether the records it waits for were dropped: app.compat.changelog_holes)
IDLE_S = 5.0


async def _slurp_changelogs(self: Recovery) -> None:
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
        read = self.app.consumer._read_offset  # Faust drops records at or below it
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
        if (seen_offset is not None and offset > seen_offset + 1
                and not await holes.follows(tp, seen_offset, offset)):
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
            except asyncio.TimeoutError:
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


def install() -> None:
    """Replace Faust's recovery loop (a service task, looked up by name when it starts)."""
    Recovery._slurp_changelogs = ServiceTask(_slurp_changelogs)  # type: ignore[assignment]

"""Two fixes to Faust's consumer around a rebalance: no input record is read from a stale
position.

Found by the two-worker kill tests (tests/broker/test_faults_kill.py), traced with per-record logs: the
survivor committed offsets of records its agent was never handed (a mood missing from the
history, a recommendation with no revision). Two Faust behaviours led there:

1. ``Recovery.on_recovery_completed`` resumes the input partitions *before* it seeks them to
   their committed offsets. Records fetched in between are delivered from wherever the fetch
   position was, then the seek resets the consumer's position under them.
2. aiokafka's ``seek_to_committed`` seeks only to offsets > 0, so a partition with no committed
   offset keeps its old position (past records the previous generation fetched but never got
   to its agent).

Fixes: seek first, then resume (1); a partition with no committed offset is read from its
beginning (2). (A third fix, to Faust's commit rule, went with the batch hand-over: commits are
by acked range now, :mod:`app.compat.consumer`.)

Upstream: faust-streaming 0.15.3 (``faust/tables/recovery.py``), aiokafka 0.14.0
(``AIOKafkaConsumer.seek_to_committed``). Tests: tests/broker/test_faults_kill.py (about one run
in four lost a record without them). Remove each when Faust seeks before it resumes and seeks
uncommitted partitions to the start.
"""

from __future__ import annotations

from typing import Any

from faust.tables.recovery import Recovery
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread


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


def install() -> None:
    Recovery.on_recovery_completed = on_recovery_completed  # type: ignore[method-assign]
    AIOKafkaConsumerThread.seek_to_committed = seek_to_committed  # type: ignore[method-assign]

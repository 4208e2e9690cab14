"""A prompt graceful stop: on SIGTERM, finish what is in flight for a moment, leave the rest.

Upstream (faust-streaming 0.15.3, ``App._stop_consumer`` -> ``App._consumer_wait_empty`` ->
``Consumer.wait_empty``): a stopping worker pauses its partitions, clears the agents' buffers,
then waits **with no time limit** until every record it delivered to an agent is acked
(``while not self.should_stop and self._unacked_messages``: the consumer's own ``should_stop``
is not set yet at that point). Records an agent holds and will not ack before it gets more —
flow control's held records, a batch whose delivery waits on a producer that is being drained —
keep that loop going until the process is killed.

Symptom: SIGTERM right after a burst (~5,000 records/s): the worker logged ``wait_empty:
Waiting for tasks`` for ~150 records for over a minute, until SIGKILL (Kubernetes: after
``terminationGracePeriodSeconds``), so neither the offsets of what it had handled were committed
nor its producer flushed; the next owner read everything since the last periodic commit again.

Here, on stop only (a rebalance keeps Faust's wait, with :mod:`app.compat.revoke`): the
callbacks of ``app.on_revoke_drop`` and ``app.on_stop_drop`` let go of what they hold, then the
half-built batches are handed to the producer and acks are awaited, all within one budget of
``ETJ_STOP_DRAIN_S`` (committing as they come, as ``wait_empty`` does); then what is acked is
committed and the stop goes on (tables, producer flush, leave the group). What is still unacked
stays so: its offsets are not committed, the next owner reads it again — as after a crash,
at-least-once, but with everything handled so far committed. Nothing is committed that is not
handled: an offset is committed only once acked, and the durable loop acks a record only after
its outputs are handed to the producer (Faust's commit flushes the producer first).

Tests: tests/broker/test_graceful_stop.py (SIGTERM mid-burst: exit within 5 s, the next worker's
answer exact, every record accounted for); tests/unit/test_graceful_stop.py (the flushes and
the drain share one budget: slow flushes do not add up). Remove when Faust bounds
``wait_empty`` on stop (it does not in 0.15.3).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

log = logging.getLogger(__name__)


#: how often the drain looks at the acks (Faust's own ``_wait_for_ack`` waits 1 s whatever
#: timeout it is given)
POLL_S = 0.05
#: how often it lets the garbage collector clear records the agents dropped (the consumer
#: tracks delivered records in a weak set)
GC_EVERY_S = 0.5


async def drain(consumer: Any, drain_s: float) -> int:
    """Wait at most ``drain_s`` for delivered records to be acked, then commit what is acked.
    Returns how many delivered records stay unacked."""
    began = time.monotonic()
    last_gc = began
    while True:
        consumer._clean_unacked_messages()
        now = time.monotonic()
        if consumer._unacked_messages and now - last_gc >= GC_EVERY_S:
            gc.collect()
            last_gc = now
            consumer._clean_unacked_messages()
        if not consumer._unacked_messages or now - began >= drain_s:
            break
        await asyncio.sleep(POLL_S)
    await consumer.commit_and_end_transactions()  # flushes the producer, then commits
    return len(consumer._unacked_messages)


def install(app: Any, drain_s: float) -> None:
    """Bound Faust's wait for acks when the app stops (a rebalance's wait is unchanged)."""
    original = app._consumer_wait_empty

    async def consumer_wait_empty(consumer: Any, logger: Any) -> None:
        if not app.should_stop:  # a rebalance: Faust's wait, after revoke.py's drops
            await original(consumer, logger)
            return
        began = time.monotonic()
        deadline = began + drain_s  # one budget for the flushes and the drain, not one each
        for drop in (*app.on_revoke_drop, *app.on_stop_drop):
            drop()
        for flush in app.on_revoke_flush:  # a batch half built waits for records Faust cleared
            try:
                await asyncio.wait_for(flush(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:  # its records stay unacked: read again by the next owner
                logger.warning("stop: a handled batch was not handed to the producer within "
                               "the %.1f s drain", drain_s)
        left = await drain(consumer, max(0.0, deadline - time.monotonic()))
        took = time.monotonic() - began
        if left:
            logger.warning("stop: %d delivered records not handled within %.1f s are left "
                           "unacked; the next owner of their partitions reads them again "
                           "(everything handled before is committed)", left, took)
        else:
            logger.info("stop: every delivered record handled and committed in %.1f s", took)

    app._consumer_wait_empty = consumer_wait_empty

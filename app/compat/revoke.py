"""Let go of records flow control holds back when a rebalance starts.

Upstream (faust-streaming 0.15.3, ``App._on_partitions_revoked``): before it gives partitions
up, Faust waits (``App._consumer_wait_empty``) until every record it delivered to an agent is
acked. A record :mod:`app.flow_control` holds back, waiting for another input to catch up in
event time, is delivered but unacked on purpose, so that wait would last until its timeout
(``broker_rebalance_timeout``) on every rebalance. Symptom without it: the graceful-restart and
two-worker tests stall for the whole timeout. The callbacks in ``app.on_revoke_drop`` (each
agent's flow control) drop what they hold and take the dropped records out of the set Faust
waits on (a weak set, but the stream generator keeps its last message alive:
``DurableLoop.drop_waiting``) and hand the batch they handled to its delivery (Faust cleared
their buffers: the batch would wait for a record that never comes; ``DurableLoop.flush_batch``),
again and again until only records on their way to the broker
are left (an agent may take and hold more records meanwhile); then Faust's own wait. Without
it, the 10-minute chaos run left a group in a rebalance for minutes. The records let go are
not acked, so they are delivered again after the rebalance. Remove when flow control acks nothing it holds (it cannot:
an ack would let the commit pass a record not yet handled).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

from app import awaiting

log = logging.getLogger(__name__)

#: how often the held records are let go while delivered ones are awaited
POLL_S = 0.05
#: how often garbage is collected meanwhile (the consumer's weak set of delivered records)
GC_EVERY_S = 0.5
#: how often a long wait says what it waits for
LOG_EVERY_S = 10.0


async def let_go(app: Any, consumer: Any) -> None:
    """Until every delivered record is acked, let go of what the agents hold (no time limit,
    as Faust's own wait: records on their way to the broker are acked when it has them)."""
    began = last_gc = time.monotonic()
    next_log = began + LOG_EVERY_S
    while True:
        for drop in app.on_revoke_drop:
            drop()
        for flush in app.on_revoke_flush:
            await flush()
        consumer._clean_unacked_messages()
        if not consumer._unacked_messages or consumer.should_stop:
            return
        now = time.monotonic()
        if now - last_gc >= GC_EVERY_S:
            gc.collect()
            last_gc = now
        if now >= next_log:
            next_log = now + LOG_EVERY_S
            waiting = sorted((m.topic, m.partition, m.offset) for m in consumer._unacked_messages)
            log.warning("rebalance: waited %.0f s for %d delivered records to be acked "
                        "(on their way to the broker?), first %s; the agents:\n%s",
                        now - began, len(waiting), waiting[:10], awaiting.agents(app))
        await asyncio.sleep(POLL_S)


def install(app: Any) -> None:
    """Let go of held records (:func:`let_go`) before Faust's wait for acks."""
    original = app._consumer_wait_empty

    async def consumer_wait_empty(consumer: Any, logger: Any) -> None:
        await let_go(app, consumer)
        await original(consumer, logger)

    app._consumer_wait_empty = consumer_wait_empty

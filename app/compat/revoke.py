"""Let go of records flow control holds back when a rebalance starts.

Upstream (faust-streaming 0.15.3, ``App._on_partitions_revoked``): before it gives partitions
up, Faust waits (``App._consumer_wait_empty``) until every record it delivered to an agent is
acked. A record :mod:`app.flow_control` holds back, waiting for another input to catch up in
event time, is delivered but unacked on purpose, so that wait would last until its timeout
(``broker_rebalance_timeout``) on every rebalance. Symptom without it: the graceful-restart and
two-worker tests stall for the whole timeout. The callbacks in ``app.on_revoke_drop`` (each
agent's flow control) drop what they hold first, take the dropped records out of the set Faust
waits on (a weak set, but the stream generator keeps its last message alive), and drop instead
of hold what the agents still take until the next assignment (``DurableLoop.drop_waiting``;
without that, the 10-minute chaos run left a group in a rebalance for minutes). The records are
not acked, so they are delivered again after the rebalance. Remove when flow control acks nothing it holds (it cannot:
an ack would let the commit pass a record not yet handled).
"""

from __future__ import annotations

from typing import Any


def install(app: Any) -> None:
    """Run ``app.on_revoke_drop``'s callbacks before Faust's wait for acks."""
    original = app._consumer_wait_empty

    async def consumer_wait_empty(consumer: Any, logger: Any) -> None:
        for drop in app.on_revoke_drop:
            drop()
        await original(consumer, logger)

    app._consumer_wait_empty = consumer_wait_empty

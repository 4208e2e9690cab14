"""app.compat.graceful_stop: the stop's flushes and its wait for acks share one budget.

``ETJ_STOP_DRAIN_S`` is what the docs and the chart's grace period count on. Each half-built
batch's flush used to get the whole budget, then the drain again: with several durable loops
(one per join) a stop could take several times the setting. Faust's consumer and app are faked
here (the fields the stop reads); the broker test (tests/broker/test_graceful_stop.py) stops a
real worker mid-burst.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

from app.compat import graceful_stop


class Consumer:
    """The part of Faust's consumer the stop uses: delivered records not acked, and a commit."""

    def __init__(self, unacked: set) -> None:
        self._unacked_messages = unacked
        self.commits: list[float] = []

    def _clean_unacked_messages(self) -> None:
        pass

    async def commit_and_end_transactions(self) -> None:
        self.commits.append(time.monotonic())


def stopping_app(flushes: list) -> SimpleNamespace:
    async def faust_wait_empty(consumer, logger) -> None:  # never reached on a stop
        raise AssertionError("a stop must not take Faust's unbounded wait")

    dropped: list[str] = []
    app = SimpleNamespace(
        should_stop=True, _consumer_wait_empty=faust_wait_empty, on_revoke_flush=flushes,
        on_revoke_drop=[lambda: dropped.append("revoke")],
        on_stop_drop=[lambda: dropped.append("stop")], dropped=dropped)
    return app


async def stop(app: SimpleNamespace, consumer: Consumer, drain_s: float) -> float:
    graceful_stop.install(app, drain_s)
    began = time.monotonic()
    await app._consumer_wait_empty(consumer, logging.getLogger("test"))
    return time.monotonic() - began


async def test_slow_flushes_and_the_drain_share_one_budget(caplog) -> None:
    async def stuck_flush() -> None:  # a batch whose producer does not answer
        await asyncio.sleep(60)

    app = stopping_app([stuck_flush, stuck_flush, stuck_flush])
    consumer = Consumer({"a record never acked"})
    took = await stop(app, consumer, drain_s=0.4)
    # one budget: 0.4 s (each flush its own plus the drain would be 4 x 0.4 = 1.6 s)
    assert 0.35 <= took < 0.9, took
    assert app.dropped == ["revoke", "stop"]
    assert len(consumer.commits) == 1  # what is acked is committed, even at the deadline
    assert "left unacked" in caplog.text


async def test_a_quick_stop_waits_only_for_the_acks() -> None:
    unacked = {"r1", "r2"}

    async def flush() -> None:  # hands its batch over at once; its acks come a moment later
        asyncio.get_running_loop().call_later(0.2, unacked.clear)

    app = stopping_app([flush, flush])
    consumer = Consumer(unacked)
    took = await stop(app, consumer, drain_s=5.0)
    assert 0.15 <= took < 1.0, took
    assert not unacked and len(consumer.commits) == 1


async def test_no_budget_still_commits_and_never_waits() -> None:
    async def stuck_flush() -> None:
        await asyncio.sleep(60)

    app = stopping_app([stuck_flush])
    consumer = Consumer({"r"})
    took = await stop(app, consumer, drain_s=0.0)
    assert took < 0.3, took
    assert len(consumer.commits) == 1


async def test_a_rebalance_keeps_fausts_wait() -> None:
    waited: list[str] = []

    async def faust_wait_empty(consumer, logger) -> None:
        waited.append("faust")

    app = SimpleNamespace(should_stop=False, _consumer_wait_empty=faust_wait_empty,
                          on_revoke_flush=[], on_revoke_drop=[], on_stop_drop=[])
    graceful_stop.install(app, 0.1)
    await app._consumer_wait_empty(Consumer(set()), logging.getLogger("test"))
    assert waited == ["faust"]

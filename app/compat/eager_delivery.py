"""Hand each fetched record to the conductor in place when that takes no wait, not in four
tasks.

Upstream (faust-streaming 0.15.3, ``faust.transport.consumer.Consumer._drain_messages``): for
every fetched record the fetch loop runs ``await self.wait_first(callback(message),
self.suspend_flow.wait())``. mode's ``wait_first`` wraps the callback, the flow event and the
service's stopped and crashed events in four tasks, waits with ``asyncio.wait`` and cancels the
three losers: five tasks and a loop turn or two per record. The callback (the conductor's
``on_message``: decode, ``put_nowait`` into each subscribed stream's queue, or into the
changelog queue during recovery) almost never waits — it waits only while flow is suspended,
the producer buffer is over its limit or a stream's queue is full. Symptom: ``wait_first`` and
``asyncio.wait`` were 20 % of a busy worker's main thread (py-spy, ``bench.profile_worker``,
default batching) and most of the fetch loop's 28 % in a 1M-key recovery.

Here the callback's coroutine is stepped once by hand, in a copy of the context as a task
would have: when it returns at once (the common case), the record is delivered
with no task at all. When it suspends, the rest of it runs in a task (:func:`resume`, which
keeps asyncio's protocol: the future it waits on, its result or error sent back, a cancellation
cancels that future) raced exactly as upstream against ``suspend_flow`` and the service's stop,
so a rebalance still cancels a delivery blocked on a full queue. Upstream's task also ran the
callback's first step before anything could cancel it, so what a delivery does before its first
wait is the same. Everything else in the loop is upstream's, line for line (the read offsets,
the gap rule that :mod:`app.compat.log_gaps` replaces, the commit every ``commit_every``).

History: from 476e53e only changelog records (recovery, standby replicas) went this way.
An earlier version that delivered input records in place too made one run in four of
``tests/broker/test_faults_kill.py::test_kill_9_mid_stream_then_restart_is_exact`` miss two
answers whose records were committed; that version stepped input records in the fetch loop's
own context instead of a copy. The cause was not established. This version (a copy of the
context for every record) then passed that test 10 times in a row, 12 more with a busy loop on
the other core, the kill, graceful-stop, duplicate, stalled-broker, unclean-restart,
flow-control and 2-minute chaos tests, and the full suite. Its first full chaos run (run 24,
docs/performance.md) ended with one wrong answer, from a standby store that disagreed with its
changelog after a graceful restart; whether this patch plays a part is not established.
Figures (``python -m bench.throughput --records 10000 --runs 1``, A B A B, 2026-11-25): one-record
batches 2,284 / 2,621 → 2,919 / 3,056 records/s, default batching 6,552 / 6,515 → 8,498 / 8,340.

Tests: ``tests/unit/test_eager_delivery.py`` (the stepping protocol: return, error, a wait, a
cancellation while waiting, context); every broker test that recovers a table delivers through
it; bench ``recovery`` measures it. Remove when Faust delivers without per-record tasks.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, AsyncIterator, Coroutine, cast

from faust.transport.consumer import CONSUMER_FETCHING, Consumer
from mode import Service

__all__ = ["install", "step", "resume"]


def step(coro: Coroutine[Any, Any, Any],
         context: contextvars.Context | None = None) -> tuple[bool, Any]:
    """Run ``coro`` up to its next wait, in ``context`` (None: the current one, as inside
    :func:`resume`'s task): (True, its result) if it returned, else (False, what it yielded to
    the loop). Its errors are raised here."""
    try:
        yielded = coro.send(None) if context is None else context.run(coro.send, None)
    except StopIteration as done:
        return True, done.value
    return False, yielded


async def resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Finish ``coro`` after :func:`step` left it at ``yielded``, as an asyncio task would: wait
    until the future it yielded is done (``None``: one loop turn), then send it on (the
    coroutine reads that future's result or error itself). When this task is cancelled
    meanwhile, cancel that future and send on once it is done, or, if it was done already,
    throw the cancellation into the coroutine (``Task.cancel`` / ``Task.__step``). Run it as a
    task in the context :func:`step` used (``create_task(..., context=)``)."""
    loop = asyncio.get_running_loop()
    while True:
        if yielded is None:  # a bare yield (asyncio.sleep(0)): one turn of the loop
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError as exc:
                done, yielded = _throw(coro, exc)
            else:
                done, yielded = step(coro)
        elif getattr(yielded, "_asyncio_future_blocking", None) is not None:
            done, yielded = await _wait_then_send(loop, coro, yielded)
        else:
            done, yielded = _throw(coro, RuntimeError(
                f"coroutine yielded {yielded!r}, not a future"))
        if done:
            return yielded


async def _wait_then_send(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                          fut: asyncio.Future) -> tuple[bool, Any]:
    fut._asyncio_future_blocking = False
    while not fut.done():
        waiter = loop.create_future()

        def wake(_: Any, waiter: asyncio.Future = waiter) -> None:
            if not waiter.done():
                waiter.set_result(None)

        fut.add_done_callback(wake)
        try:
            await waiter
        except asyncio.CancelledError as exc:
            fut.remove_done_callback(wake)
            if not fut.cancel():  # done already: the coroutine gets the cancellation itself
                return _throw(coro, exc)
            # cancelled (a future) or cancelling (a task): send on once it is done
    return step(coro)


def _throw(coro: Coroutine[Any, Any, Any], exc: BaseException) -> tuple[bool, Any]:
    try:
        yielded = coro.throw(exc)
    except StopIteration as done:
        return True, done.value
    return False, yielded


async def _drain_messages(self: Consumer, fetcher: Any) -> None:  # pragma: no cover
    # upstream's loop (faust 0.15.3), but for the delivery (marked below)
    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = cast(Service, self)._stopped.is_set
    fetcher_should_stop = cast(Service, fetcher)._stopped.is_set

    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    flag_consumer_fetching = CONSUMER_FETCHING
    set_flag = self.diag.set_flag
    unset_flag = self.diag.unset_flag
    commit_every = self._commit_every
    acks_enabled_for = self.app.topics.acks_enabled_for
    loop = asyncio.get_running_loop()

    yield_every = 100
    num_since_yield = 0
    sleep = asyncio.sleep

    try:
        while not (consumer_should_stop() or fetcher_should_stop()):
            set_flag(flag_consumer_fetching)
            ait = cast(AsyncIterator, getmany(timeout=1.0))
            await self.sleep(0)
            if not self.should_stop:
                async for tp, message in ait:
                    num_since_yield += 1
                    if num_since_yield > yield_every:
                        await sleep(0)
                        num_since_yield = 0

                    offset = message.offset
                    r_offset = get_read_offset(tp)
                    if r_offset is None or offset >= r_offset:
                        gap = offset - (r_offset or 0)
                        if gap > 1 and r_offset:
                            acks_enabled = acks_enabled_for(message.topic)
                            if acks_enabled:
                                await self._add_gap(tp, r_offset + 1, offset)
                        if commit_every is not None:
                            if self._n_acked >= commit_every:
                                self._n_acked = 0
                                await self.commit()
                        # etj: delivered in place when that takes no wait (module docstring)
                        context = contextvars.copy_context()
                        coro = callback(message)
                        done, yielded = step(coro, context)
                        if not done:
                            await self.wait_first(
                                loop.create_task(resume(coro, yielded), context=context),
                                self.suspend_flow.wait())
                        set_read_offset(tp, offset)
                    else:
                        self.log.dev("DROPPED MESSAGE ROFF %r: k=%r v=%r",
                                     offset, message.key, message.value)
                unset_flag(flag_consumer_fetching)

    except self.consumer_stopped_errors:
        if self.transport.app.should_stop:
            self.log.info("Broker stopped consumer, shutting down...")
            return
        raise
    except asyncio.CancelledError:
        if self.transport.app.should_stop:
            self.log.info("Consumer shutting down for user cancel.")
            return
        raise
    except Exception as exc:
        self.log.exception("Drain messages raised: %r", exc)
        raise
    finally:
        unset_flag(flag_consumer_fetching)


def install() -> None:
    """Replace Faust's fetch loop (called by its Fetcher service on start)."""
    Consumer._drain_messages = _drain_messages  # type: ignore[method-assign]

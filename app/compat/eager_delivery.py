"""Hand each fetched changelog record to the conductor in place when that takes no wait, not in
four tasks: the stepping that :class:`app.compat.consumer.EtjConsumer` uses for every record it
does not hand to an agent's loop (table changelogs: recovery and standby replicas).

Upstream (faust-streaming 0.15.3, ``faust.transport.consumer.Consumer._drain_messages``): for
every fetched record the fetch loop runs ``await self.wait_first(callback(message),
self.suspend_flow.wait())``. mode's ``wait_first`` wraps the callback, the flow event and the
service's stopped and crashed events in four tasks, waits with ``asyncio.wait`` and cancels the
three losers: five tasks and a loop turn or two per record. The callback (the conductor's
``on_message``: decode, ``put_nowait`` into the changelog queue during recovery) almost never
waits — only while flow is suspended or the queue is full. Symptom: ``wait_first`` and
``asyncio.wait`` were most of the fetch loop's 28 % of the main thread in a 1M-key recovery.

Here the callback's coroutine is stepped once by hand (:func:`step`), in a copy of the context
as a task would have: when it returns at once (the common case), the record is delivered with
no task at all. When it suspends, the rest of it runs in a task (:func:`resume`, which keeps
asyncio's protocol: the future it waits on, its result or error sent back, a cancellation
cancels that future) raced exactly as upstream against ``suspend_flow``, so a rebalance still
cancels a delivery blocked on a full queue. Input records no longer take this path: they go to
their agent's loop a fetch at a time (:mod:`app.compat.consumer`).

Tests: ``tests/unit/test_eager_delivery.py`` (the stepping protocol: return, error, a wait, a
cancellation while waiting, context); every broker test that recovers a table delivers through
it; bench ``recovery`` measures it. Remove when Faust delivers without per-record tasks.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any

__all__ = ["step", "resume"]


def step(
    coro: Coroutine[Any, Any, Any], context: contextvars.Context | None = None
) -> tuple[bool, Any]:
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
            done, yielded = _throw(
                coro, RuntimeError(f"coroutine yielded {yielded!r}, not a future")
            )
        if done:
            return yielded


async def _wait_then_send(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], fut: asyncio.Future
) -> tuple[bool, Any]:
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

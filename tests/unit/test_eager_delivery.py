"""The fetch loop's delivery in place (app.compat.eager_delivery): a coroutine stepped by hand,
then finished in a task, must behave exactly as if a task had run it from the start."""

import asyncio
import contextvars

import pytest

from app.compat.eager_delivery import resume, step

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="outside")


async def deliver(coro):
    """What the fetch loop does: step in place in a copied context; if it waits, a task."""
    context = contextvars.copy_context()
    done, value = step(coro, context)
    if done:
        return "in place", value
    task = asyncio.get_running_loop().create_task(resume(coro, value), context=context)
    return "task", await task


async def test_a_coroutine_that_does_not_wait_runs_in_place_and_returns_its_value():
    async def quick():
        VAR.set("inside")  # a context variable set by the delivery stays in its context
        return 42

    assert await deliver(quick()) == ("in place", 42)
    assert VAR.get() == "outside"


async def test_an_error_before_the_first_wait_is_raised_at_once():
    async def bad():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await deliver(bad())


async def test_a_full_queue_put_waits_and_completes_when_room_is_made():
    q: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
    q.put_nowait(1)
    seen = []

    async def put():
        VAR.set("inside")
        await q.put(2)  # waits on a future until the get below
        seen.append(VAR.get())
        return "put"

    pending = asyncio.ensure_future(deliver(put()))
    await asyncio.sleep(0.01)
    assert not pending.done() and q.qsize() == 1
    assert q.get_nowait() == 1
    assert await asyncio.wait_for(pending, 1) == ("task", "put")
    assert q.get_nowait() == 2 and seen == ["inside"] and VAR.get() == "outside"


async def test_the_result_and_the_error_of_the_awaited_future_reach_the_coroutine():
    loop = asyncio.get_running_loop()
    ok, bad = loop.create_future(), loop.create_future()

    async def reads():
        value = await ok
        try:
            await bad
        except KeyError as exc:
            return value, repr(exc)
        return value, None

    coro = reads()
    done, yielded = step(coro, contextvars.copy_context())
    assert not done and yielded is ok
    task = loop.create_task(resume(coro, yielded))
    loop.call_later(0.01, ok.set_result, "v")
    loop.call_later(0.02, bad.set_exception, KeyError("k"))
    assert await asyncio.wait_for(task, 1) == ("v", "KeyError('k')")


async def test_cancelling_the_task_cancels_the_future_the_coroutine_waits_on():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    seen = []

    async def waits():
        try:
            await fut
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    coro = waits()
    done, yielded = step(coro)
    task = loop.create_task(resume(coro, yielded))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fut.cancelled() and seen == ["cancelled"]


async def test_cancelling_while_it_awaits_a_task_waits_for_that_task_to_end():
    loop = asyncio.get_running_loop()
    order = []

    async def inner():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # cleans up before it ends
            order.append("inner ended")
            raise

    async def outer():
        try:
            await loop.create_task(inner())
        except asyncio.CancelledError:
            order.append("outer saw it")
            raise

    coro = outer()
    done, yielded = step(coro)
    task = loop.create_task(resume(coro, yielded))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert order == ["inner ended", "outer saw it"]


async def test_a_cancellation_the_coroutine_swallows_lets_it_finish():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    async def shrugs():
        try:
            await fut
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # a bare yield after it
            return "kept going"

    coro = shrugs()
    task = loop.create_task(resume(coro, step(coro)[1]))
    await asyncio.sleep(0)
    task.cancel()
    assert await task == "kept going"


async def test_bare_yields_and_timers_are_waited_like_a_task_would():
    async def sleeps():
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        return "slept"

    assert await deliver(sleeps()) == ("task", "slept")

"""Where a coroutine waits: its chain of awaits, for a person reading a stall's log line.

Why: a worker whose agent stops handling records says nothing by itself — no traceback, the
task is alive, only suspended on some await. ``Task.get_stack()`` gives the outer frame of a
suspended coroutine only; the await that blocks is at the other end of the chain
(``cr_await`` -> ... -> a future). The stall guard (:mod:`app.loop.stall_guard`) and the
rebalance wait (``EtjApp._consumer_wait_empty``) log it with each agent loop's state
(:meth:`app.loop.durable.DurableLoop.describe`). Found necessary by the fourth 10-minute
chaos run: a worker's agents stopped after a rebalance and its log said only "stalled".
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

#: most awaits listed per task (the innermost ones are kept)
MAX_DEPTH = 12


def chain(task: asyncio.Future[Any] | None) -> list[str]:
    """``file:line function`` of each coroutine ``task`` awaits through, outermost first, and
    what it waits on at the end (a future, a queue's getter)."""
    if task is None:
        return ["(none)"]
    if task.done():
        if task.cancelled():
            return ["(cancelled)"]
        exc = task.exception()
        return [f"(done{'' if exc is None else f', raised {exc!r}'})"]
    out: list[str] = []
    coro: Any = task.get_coro() if isinstance(task, asyncio.Task) else None
    while coro is not None:
        frame = _frame(coro)
        if frame is None:
            # a wrapper that does not expose what it runs: ``await obj`` whose ``__await__``
            # is a coroutine's (Faust's agent actor), an async generator's ``asend`` (a
            # stream), a future's iterator; the garbage collector knows what it holds
            held = gc.get_referents(coro)
            inner = [r for r in held if _frame(r) is not None]
            if inner:
                coro = inner[0]
                continue
            futures = [r for r in held if isinstance(r, asyncio.Future)]
            out.append(f"waits on {_future(futures[0])}" if futures else f"<{type(coro).__name__}>")
            break
        code = frame.f_code
        out.append(f"{_short(code.co_filename)}:{frame.f_lineno} {code.co_name}")
        nxt = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "gi_yieldfrom", None)
            or getattr(coro, "ag_await", None)
        )
        if nxt is None or not hasattr(nxt, "__await__") and not hasattr(nxt, "send"):
            break
        if isinstance(nxt, asyncio.Future):
            out.append(f"waits on {_future(nxt)}")
            break
        coro = nxt
    if isinstance(task, asyncio.Task):
        waiter = getattr(task, "_fut_waiter", None)
        if waiter is not None and not (out and out[-1].startswith("waits on")):
            out.append(f"waits on {_future(waiter)}")
    return out[-MAX_DEPTH:]


def agents(app: Any) -> str:
    """What each agent loop of ``app`` is doing, and the producer's state."""
    from app.compat.producer import describe_producer

    parts = [loop.describe() for loop in getattr(app, "loops", ())]
    return "\n".join([*parts, describe_producer(app)])


def _frame(coro: Any) -> Any:
    return (
        getattr(coro, "cr_frame", None)
        or getattr(coro, "gi_frame", None)
        or getattr(coro, "ag_frame", None)
    )


def _future(fut: asyncio.Future[Any]) -> str:
    state = "cancelled" if fut.cancelled() else "done" if fut.done() else "pending"
    return f"{type(fut).__name__} {state}"


def _short(path: str) -> str:
    """A path from its package down: .../site-packages/faust/x.py -> faust/x.py."""
    parts = path.split(os.sep)
    for marker in ("site-packages", "asyncio", "app", "tests", "bench"):
        if marker in parts:
            i = len(parts) - 1 - parts[::-1].index(marker)
            return "/".join(parts[i + 1 :] if marker == "site-packages" else parts[i:])
    return path

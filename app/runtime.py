"""Which asyncio event loop the worker runs on: uvloop unless ``ETJ_EVENT_LOOP=asyncio``.

Why: a worker's main thread is CPU-bound on Faust's per-record path, and most of that path is
event-loop work — mode's ``wait_first`` makes four tasks and an ``asyncio.wait`` per fetched
record, every produce is a future with callbacks, every agent step a ``call_soon``. uvloop runs
the loop, its handles and its sockets in C. Measured on the ``throughput`` backlog (10,000
records, 2 cores, two interleaved runs each): one-record batches 2,745–2,860 → 3,334–3,439
records/s, default batching 6,954–7,013 → 7,837–7,930 records/s (docs/contributing/performance-log.md).

faust-streaming 0.15.3 parses ``faust -L uvloop`` but never applies it, so the choice is made
here, before the CLI creates the loop (``app.main`` is imported first). A loop already running
(a test's) is left alone: the policy only decides the loops made after it.
"""

from __future__ import annotations

import asyncio

import uvloop

from app.settings import Settings


def use(settings: Settings) -> str:
    """Set the event loop policy from ``settings.event_loop``; the name of the one in force."""
    if settings.event_loop == "uvloop":
        # what mode.loop.use("uvloop") does on its first import only: here on every call
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return type(asyncio.get_event_loop_policy()).__module__.split(".")[0]

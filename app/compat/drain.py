"""Hand each fetched record to Faust's conductor without four asyncio tasks per record.

Upstream (faust-streaming 0.15.3, ``faust.transport.consumer.Consumer._drain_messages``): for
every record it runs ``await self.wait_first(callback(message), self.suspend_flow.wait())`` so
that a rebalance (which sets ``suspend_flow``) can abandon a callback blocked on a full or
suspended queue. mode's ``wait_first`` wraps each argument, and the service's ``stopped`` and
``crashed`` events, in a new task and ``asyncio.wait``s on them: four tasks created and three
cancelled per record, although the callback almost never blocks (it decodes the record and puts
it on an agent's queue, or the changelog queue during recovery). Symptom: profiled, the fetch
loop (``Fetcher._fetcher`` -> ``wait_first``) took ~23 % of the main thread while a worker
replayed a changelog and ~16 % while it joined a backlog (``python -m bench.profile_worker``).

Here the callback's coroutine is first stepped in place: if it finishes without waiting (the
common case) nothing else happens; if it waits, the rest of it runs exactly as before, as a task
under ``wait_first`` with ``suspend_flow`` (:func:`_resume` continues the started coroutine),
so a rebalance still abandons a blocked callback. Everything else is upstream's loop, line for
line. Python 3.11 has no eager tasks (3.12's ``eager_start``), hence the stepping by hand.

Tests: tests/unit/test_compat.py (a coroutine that finishes at once, one that waits, one
abandoned by cancellation: same results and exceptions as awaiting it), and every broker test
(all records flow through it: exact joins, rebalances, faults). Remove when Faust drains without
per-record tasks (or the project requires Python 3.12 and can use an eager task instead).
"""

from __future__ import annotations

import asyncio
import types
from typing import Any, AsyncIterator, Coroutine, Generator, cast

from faust.transport.consumer import CONSUMER_FETCHING, Consumer

__all__ = ["install", "run_inline"]


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """Continue ``coro``, which has already yielded ``waiting_on`` to its (absent) task: the
    task awaiting this generator now waits on it, then steps ``coro`` on, forwarding a
    cancellation (or any exception) into it."""
    while True:
        try:
            yield waiting_on
        except BaseException as exc:  # the task was cancelled: let the coroutine handle it
            try:
                waiting_on = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                waiting_on = coro.send(None)
            except StopIteration as stop:
                return stop.value


async def _finish(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Any:
    return await _resume(coro, waiting_on)


def run_inline(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Step ``coro`` once: (True, its result) if it finished, else (False, a coroutine that
    finishes it). Exceptions it raises at once propagate."""
    try:
        waiting_on = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, _finish(coro, waiting_on)


async def _drain_messages(self: Consumer, fetcher: Any) -> None:  # pragma: no cover
    # upstream's loop (module docstring); the one change is marked "etj:"
    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = self._stopped.is_set
    fetcher_should_stop = fetcher._stopped.is_set

    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    flag_consumer_fetching = CONSUMER_FETCHING
    set_flag = self.diag.set_flag
    unset_flag = self.diag.unset_flag
    commit_every = self._commit_every
    acks_enabled_for = self.app.topics.acks_enabled_for

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
                        # etj: step the callback in place; only a callback that waits
                        # runs under wait_first (abandoned if a rebalance suspends flow)
                        done, rest = run_inline(callback(message))
                        if not done:
                            await self.wait_first(rest, self.suspend_flow.wait())
                        set_read_offset(tp, offset)
                    else:
                        self.log.dev("DROPPED MESSAGE ROFF %r: k=%r v=%r", offset,
                                     message.key, message.value)
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
    """Replace Faust's drain loop (every consumer class inherits it from ``Consumer``)."""
    Consumer._drain_messages = _drain_messages  # type: ignore[method-assign]

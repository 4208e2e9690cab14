"""A timer that reads again an input partition whose records never reached its agent
(``ETJ_STALL_CHECK_S``; installed by :func:`install` from :mod:`app.main`).

Why: found by the kill -9 and restart tests. Around a rebalance the consumer can read past
records it never hands over (a fetch cut by a generation change, a partition seeked
meanwhile), and Faust's recovery can leave a partition paused. The hand-over refuses a batch
that does not follow the last one (:meth:`app.compat.consumer.EtjConsumer._follows`), and the
commit never passes an offset that was not handled; this guard covers what neither sees: the *last* records of a
partition read past with nothing after them to show the hole, and a partition left paused.

Every ``ETJ_STALL_CHECK_S``, per assigned input partition, seen twice in a row:
- Faust left the partition paused while records wait in the broker (not paused by the hand-over
  because its agent's inbox is full) -> resume it;
- the fetch position past the next offset to hand over, with nothing waiting for the agent ->
  seek back to that offset.
A partition whose agent holds records (in its inbox, in flow control, in flight) is not stalled:
a slow agent is not helped by reading its records again; it is logged with what every agent is
doing (:mod:`app.loop.awaiting`). A topic several agents read is busy while any of them holds
records: the fetch position is one for all of them.

What it makes up for: faust-streaming 0.15.3 (``Fetcher`` dropping a cut fetch, ``Recovery``
leaving a partition paused). It reads the consumer through etj's consumer class only. Tests:
tests/unit/test_stall_guard.py; tests/broker/test_faults_kill.py (two workers, kill -9). It can
go when Faust hands every fetched record over across a rebalance (then this finds nothing: its
log lines say so).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from app.loop import awaiting

log = logging.getLogger(__name__)

#: tp -> what looked stalled at the previous check
_suspects: dict[Any, tuple[Any, ...]] = {}
#: the longest a check waits for the consumer's position of one partition (aiokafka's
#: ``position`` waits, with no limit, for a partition whose position is being reset)
POSITION_TIMEOUT_S = 5.0
#: how often at most a stall logs what every agent is doing (app.loop.awaiting)
DESCRIBE_EVERY_S = 60.0
_described = [0.0]


async def check_stalls(app: Any) -> list[Any]:
    """Resume or read again every input partition found stalled twice in a row; return them."""
    consumer = app.consumer
    fixed = []
    seen = set()
    busy_topics = {
        topic
        for loop in getattr(app, "loops", ())
        if loop.inbox.waiting() + loop.merge.waiting() + loop.in_flight
        for topic in loop.inbox.topics
    }
    for tp in list(consumer.input_partitions()):
        try:
            highwater = consumer.highwater(tp)
            position = await asyncio.wait_for(consumer.position(tp), POSITION_TIMEOUT_S)
        except TimeoutError:
            log.info(
                "input %s[%s]: no fetch position within %.0f s (being reset); checked next time",
                tp.topic,
                tp.partition,
                POSITION_TIMEOUT_S,
            )
            continue
        except Exception:
            continue
        if highwater is None or position is None:
            continue
        busy = tp.topic in busy_topics
        nxt = consumer.next_offset(tp)
        if position < highwater and not consumer.fetching(tp) and not consumer.held_back(tp):
            state: tuple[Any, ...] = ("paused", position)
            why = "paused with records waiting"
        elif nxt is not None and position > nxt and not busy:
            state, why = ("tail", nxt, position), f"records from {nxt} read, never handed over"
        else:
            continue
        seen.add(tp)
        if _suspects.get(tp) != state:
            _suspects[tp] = state
            continue
        if state[0] == "paused":
            log.warning(
                "input %s[%s] stalled: %s, fetch position %s, high watermark %s; resuming it",
                tp.topic,
                tp.partition,
                why,
                position,
                highwater,
            )
            consumer.resume_partitions({tp})
        else:
            log.warning(
                "input %s[%s] stalled: %s, fetch position %s, high watermark %s; "
                "reading again from %s",
                tp.topic,
                tp.partition,
                why,
                position,
                highwater,
                nxt,
            )
            await consumer.seek(tp, nxt)
            consumer.rewound(tp, nxt)
        fixed.append(tp)
        seen.discard(tp)
        _suspects.pop(tp, None)
    for tp in set(_suspects) - seen:
        del _suspects[tp]
    now = time.monotonic()
    if fixed and now - _described[0] >= DESCRIBE_EVERY_S:
        _described[0] = now  # an agent blocked somewhere says where (app.loop.awaiting)
        log.warning(
            "stalled inputs %s; the agents:\n%s",
            sorted(f"{tp.topic}[{tp.partition}]" for tp in fixed),
            awaiting.agents(app),
        )
    return fixed


def install(app: Any, interval_s: float) -> None:
    """Check ``app``'s input partitions every ``interval_s`` (a Faust timer)."""

    async def unstall_inputs() -> None:
        if not app.rebalancing:
            await check_stalls(app)

    unstall_inputs.__qualname__ = unstall_inputs.__name__ = "unstall_inputs"
    unstall_inputs.__module__ = __name__
    app.timer(interval=interval_s)(unstall_inputs)

"""A timer that reads again an input partition whose records never reached its agent.

Why: found by the kill -9 and restart tests. Around a rebalance Faust can read past records it
never hands to the agent: its stream skips a record delivered across a generation change, a
fetch cut by the generation change is dropped while the fetch position moves on, a partition
can be left paused. :mod:`app.compat.rebalance` keeps such records from being committed (the commit
waits for the first unhandled offset); this guard has them read now instead of at the next
restart.

Every ``ETJ_STALL_CHECK_S``, per assigned input partition, seen twice in a row:
- a hole at the head (the first unhandled offset, the committed one, read past while later
  ones were acked) -> counted as handled if aiokafka read past it with no record (a transaction
  marker, compaction: :mod:`app.compat.log_gaps`), else seek back to it (again, as long as it
  stays missing: a record the log holds is never counted without being handled);
- Faust left the partition paused while records wait in the broker -> resume it;
- the fetch position at the high watermark while records after the last one handled (acked)
  never were -> seek back to the first of them.
None of these while the agent has the records: a record of the partition (of the current
generation) waiting in an agent's buffer or delivered and not acked yet is on its way, and a
partition Faust paused because that buffer is full (``Consumer._buffered_partitions``, its back
pressure; it resumes it when the buffer drains) is not stalled. A slow or blocked agent is not
helped by reading its records again: the tenth 10-minute chaos run re-read thousands of records
a slow agent already held every 20 s, and resumed partitions Faust had paused for back pressure,
until its buffer held the same records several times and it never caught up (a worker's
partition "stalled" for minutes). Such a partition is logged instead, with what every agent is
doing (:mod:`app.awaiting`).

Upstream: faust-streaming 0.15.3 (``Stream`` skipping a record across a generation change,
``Fetcher`` dropping a cut fetch, ``Recovery`` leaving a partition paused). Tests:
tests/broker/test_faults_kill.py (two workers, kill -9, the survivor alone) and
test_broker_mood_join.py's graceful restart fail without it, a run in three or four. It reads
the consumer's private ``_read_offset``/``_acked``/``_gap``. Remove when Faust hands every
fetched record to its agent across a rebalance (then this finds nothing: its log lines say so).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from app import awaiting
from app.compat import log_gaps
from app.compat.rebalance import first_unhandled, is_input

log = logging.getLogger(__name__)

#: tp -> what looked stalled at the previous check
_suspects: dict[Any, tuple[Any, ...]] = {}
#: the longest a check waits for the consumer's position of one partition (aiokafka's
#: ``position`` waits, with no limit, for a partition whose position is being reset)
POSITION_TIMEOUT_S = 5.0
#: how often at most a stall logs what every agent is doing (app.awaiting)
DESCRIBE_EVERY_S = 60.0
_described = [0.0]


async def check_stalls(app: Any) -> list[Any]:
    """Seek back every input partition found stalled twice in a row; return them."""
    consumer = app.consumer
    read_offset = getattr(consumer, "_read_offset", {})
    fixed = []
    slow: list[str] = []
    seen = set()
    for tp in (tp for tp in consumer.assignment() if is_input(app, tp)):
        try:
            highwater = consumer.highwater(tp)
            position = await asyncio.wait_for(consumer.position(tp), POSITION_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.info("input %s[%s]: no fetch position within %.0f s (being reset); checked "
                     "next time", tp.topic, tp.partition, POSITION_TIMEOUT_S)
            continue
        except Exception:
            continue
        last = read_offset.get(tp)
        first = first_unhandled(consumer, tp)
        acked = consumer._acked.get(tp) or ()
        hole = (first is not None and acked and min(acked) > first and last is not None
                and last >= first)
        paused = (highwater is not None and position is not None and position < highwater
                  and tp not in consumer._get_active_partitions())
        if paused and tp in consumer._buffered_partitions and _queued(app, tp, None):
            continue  # Faust's back pressure: the agent's buffer is full, it resumes it
        if hole and (end := log_gaps.count_if_absent(consumer, tp, first)) is not None:
            # the log does not hold `first` (aiokafka read past it): handled, as Faust's gaps
            log.info("input %s[%s]: offsets %s-%s are not in the log (a transaction marker, "
                     "compaction); counted as handled", tp.topic, tp.partition, first, end - 1)
            _suspects.pop(tp, None)
            continue
        if hole:
            # a hole at the head: later records were handled, `first` never was, and the
            # consumer read past it (app.compat.rebalance keeps the commit from passing it)
            why, again, state = (f"records after {first} handled, {first} never", first,
                                 ("hole", first, min(acked)))
        elif paused:
            # records wait in the broker but Faust left the partition paused (seen once in a
            # while after a restart: a partition never consumed)
            why, again, state = ("paused with records waiting", None, ("paused", last, position))
        elif highwater is None or position is None or position < highwater:
            continue  # still fetching: not stalled
        else:
            # the record after the last one handled (acked); Faust's "last read" offset is no
            # guide: a record its stream skipped (a generation change) counts as read
            if first is not None:
                again = max(first, max(acked) + 1) if acked else first
            else:
                again = max(acked) + 1 if acked else (last + 1) if last is not None else 0
            if again >= highwater:
                continue  # everything fetched was handled
            why, state = (f"last record handled {again - 1}, last read {last}",
                          ("tail", again, position))
        if state[0] != "paused":
            # the agent has the record (a hole) or records from there on (a tail): slow or
            # blocked, not skipped; a tail's skipped record shows as a hole once later ones
            # are handled
            busy = _queued(app, tp, again) + _unacked(app, tp, again)
            if state[0] == "hole":
                busy = [offset for offset in busy if offset == again]
            if busy:  # logged when the agent acked nothing of it between two checks
                state = ("busy", again, max(acked) if acked else None)
                seen.add(tp)
                if _suspects.get(tp) == state:
                    slow.append(f"{tp.topic}[{tp.partition}] ({len(busy)} records from "
                                f"{again} delivered, none handled since the last check)")
                _suspects[tp] = state
                continue
        seen.add(tp)
        if _suspects.get(tp) == state and state[0] == "paused":
            log.warning("input %s[%s] stalled: %s, fetch position %s, high watermark %s; "
                        "resuming it", tp.topic, tp.partition, why, position, highwater)
            consumer.resume_partitions({tp})
            fixed.append(tp)
            seen.discard(tp)
        elif _suspects.get(tp) == state:
            log.warning("input %s[%s] stalled: %s, fetch position %s, high watermark %s; "
                        "reading again from %s", tp.topic, tp.partition, why, position,
                        highwater, again)
            await consumer.seek(tp, again)
            fixed.append(tp)
            seen.discard(tp)
        else:
            _suspects[tp] = state
    for tp in set(_suspects) - seen:
        del _suspects[tp]
    now = time.monotonic()
    if (fixed or slow) and now - _described[0] >= DESCRIBE_EVERY_S:
        _described[0] = now  # an agent blocked somewhere says where (app.awaiting)
        log.warning("stalled inputs %s, inputs an agent holds and does not handle %s; the "
                    "agents:\n%s", sorted(f"{tp.topic}[{tp.partition}]" for tp in fixed), slow,
                    awaiting.agents(app))
    return fixed


def _queued(app: Any, tp: Any, start: int | None) -> list[int]:
    """Offsets (from ``start``; None: any) of ``tp``'s records of the current generation waiting
    in the agents' buffers (the conductor's channels of its topic; Faust's stream skips, unacked,
    the records of an earlier generation, so those do not count)."""
    generation = app.consumer_generation_id
    out = []
    for channel in app.topics._topic_name_index.get(tp.topic, ()):
        # ``_queue``, not the ``queue`` property: that one creates a buffer a channel lacks
        for event in list(getattr(getattr(channel, "_queue", None), "_queue", ())):
            msg = getattr(event, "message", None)
            if (msg is not None and msg.tp == tp and msg.generation_id == generation
                    and (start is None or msg.offset >= start)):
                out.append(msg.offset)
    return out


def _unacked(app: Any, tp: Any, start: int) -> list[int]:
    """Offsets from ``start`` of ``tp``'s records an agent took and has not acked yet (held by
    flow control, in a batch on its way to the broker)."""
    generation = app.consumer_generation_id
    return [m.offset for m in list(app.consumer._unacked_messages)
            if m.tp == tp and m.generation_id == generation and m.offset >= start]


def install(app: Any, interval_s: float) -> None:
    """Check ``app``'s input partitions every ``interval_s`` (a Faust timer)."""

    async def unstall_inputs() -> None:
        if not app.rebalancing:
            await check_stalls(app)

    unstall_inputs.__qualname__ = unstall_inputs.__name__ = "unstall_inputs"
    unstall_inputs.__module__ = __name__
    app.timer(interval=interval_s)(unstall_inputs)

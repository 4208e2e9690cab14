"""Timer: re-read an input partition whose fetched records never reached its agent.

Why: found by the kill -9 tests (tests/test_faults_kill.py). Faust resumes the input partitions
*before* it seeks them to their committed offsets after a rebalance (``Recovery.
on_recovery_completed``), so records fetched in between are delivered and then fetched on top
of. A partition with no committed offset yet is not seeked at all (aiokafka seeks only to an
offset > 0), and there the records of a fetch cut by that window are lost from the consumer's
view: the fetch position is at the end of the partition, the last record handed to the agent is
several offsets behind, and nothing more ever arrives (seen: zone readings 5-8 of a partition
never joined after a restart). Records are never acked past a gap, so their offsets stay
uncommitted; this guard makes the worker read them now instead of at the next restart.

Every ``ETJ_STALL_CHECK_S`` it compares, per assigned input partition, the last offset Faust
handed to the agents with the fetch position and the high watermark. Stalled twice in a row
(nothing delivered, position at the end, records missing in between) -> seek back to the
record after the last one delivered; a partition Faust left paused while records wait in the
broker (seen after a restart) is resumed. Same for a hole at the head: the first unhandled offset
(the committed one) was read past but never acked while later ones were — the commit waits
for it (app.rebalance_fixes), this guard has it read again. At worst (an agent blocked that long) that re-delivers
records: the joins are idempotent, so a repeat changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from app.faust_app import app, settings
from app.rebalance_fixes import first_unhandled

log = logging.getLogger(__name__)

#: tp -> what looked stalled at the previous check
_suspects: dict[Any, tuple[Any, ...]] = {}
#: tp -> the head offset it was last read again from
_reread: dict[Any, int] = {}


def _input_partitions() -> list[Any]:
    consumer = app.consumer
    changelogs = set(app.tables.changelog_topics)
    return [tp for tp in consumer.assignment()
            if tp.topic not in changelogs and "__assignor" not in tp.topic]


async def check_stalls() -> list[Any]:
    """Seek back every input partition found stalled twice in a row; return them."""
    consumer = app.consumer
    read_offset = getattr(consumer, "_read_offset", {})
    fixed = []
    seen = set()
    for tp in _input_partitions():
        try:
            highwater = consumer.highwater(tp)
            position = await consumer.position(tp)
        except Exception:
            continue
        last = read_offset.get(tp)
        first = first_unhandled(consumer, tp)
        acked = consumer._acked.get(tp) or ()
        if first is not None and acked and min(acked) > first and last is not None \
                and last >= first:
            # a hole at the head: later records were handled, `first` never was, and the
            # consumer read past it (app.rebalance_fixes keeps the commit from passing it)
            why, again, state = (f"records after {first} handled, {first} never", first,
                                 ("hole", first, min(acked)))
        elif (highwater is not None and position is not None and position < highwater
              and tp not in consumer._get_active_partitions()):
            # records wait in the broker but Faust left the partition paused (seen once in a
            # while after a restart: a partition never consumed)
            _reread.pop(tp, None)
            why, again, state = ("paused with records waiting", None, ("paused", last, position))
        elif highwater is None or position is None or position < highwater:
            _reread.pop(tp, None)
            continue  # still fetching: not stalled
        else:
            _reread.pop(tp, None)
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
        seen.add(tp)
        if state[0] == "hole" and _reread.get(tp) == first and _suspects.get(tp) == state:
            # read again from `first` and still not delivered: not in the log
            log.warning("input %s[%s]: offset %s is not in the log (a transaction marker, "
                        "compaction); counted as handled", tp.topic, tp.partition, first)
            consumer._gap[tp].addi(first, first + 1)
            fixed.append(tp)
            seen.discard(tp)
        elif _suspects.get(tp) == state and state[0] == "paused":
            log.warning("input %s[%s] stalled: %s, fetch position %s, high watermark %s; "
                        "resuming it", tp.topic, tp.partition, why, position, highwater)
            consumer.resume_partitions({tp})
            fixed.append(tp)
            seen.discard(tp)
        elif _suspects.get(tp) == state:
            if state[0] == "hole":
                _reread[tp] = first
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
    return fixed


@app.timer(interval=settings.stall_check_s)
async def unstall_inputs() -> None:
    if not app.rebalancing:
        await check_stalls()

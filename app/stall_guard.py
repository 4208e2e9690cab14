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
record after the last one delivered. At worst (an agent blocked that long) that re-delivers
records: the joins are idempotent, so a repeat changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from app.faust_app import app, settings

log = logging.getLogger(__name__)

#: tp -> (last delivered offset, position) at the previous check
_suspects: dict[Any, tuple[int | None, int]] = {}


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
        if highwater is None or position is None or position < highwater:
            continue  # still fetching: not stalled
        expected_next = (last + 1) if last is not None else (
            getattr(consumer, "_committed_offset", {}).get(tp) or 0)
        if expected_next >= highwater:
            continue  # everything fetched was delivered
        seen.add(tp)
        if _suspects.get(tp) == (last, position):
            log.warning("input %s[%s] stalled: last record delivered %s, fetch position %s, "
                        "high watermark %s; reading again from %s", tp.topic, tp.partition,
                        last, position, highwater, expected_next)
            await consumer.seek(tp, expected_next)
            fixed.append(tp)
            seen.discard(tp)
        else:
            _suspects[tp] = (last, position)
    for tp in set(_suspects) - seen:
        del _suspects[tp]
    return fixed


@app.timer(interval=settings.stall_check_s)
async def unstall_inputs() -> None:
    if not app.rebalancing:
        await check_stalls()

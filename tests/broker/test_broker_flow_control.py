"""Flow control on a real broker: a backlog of both inputs is joined in event-time order.

The whole out-of-order scenario is in the broker before the worker starts (a replay, a restart
after downtime). It spans 300 s of event time with a 60 s retention, so an input drained ahead
of the other pushes stream time on until the other's records are late. With flow control
nothing is late and the answer is exact; without it (``ETJ_FLOW_CONTROL=false``) the same
backlog loses records to the late topic — which shows the scenario needs it.
"""

from __future__ import annotations

from app.commands.sample_traffic import sample_moods_and_events
from tests.faults import answers, diff, fates_of, send, wait_converged
from tests.harness import make_names, read_all, wait_for
from tests.oracle import exact_mood_answer

START = 1_790_000_000_000


def backlog() -> list[tuple[str, str, dict]]:
    return sample_moods_and_events(seed=7, count=300, start_ms=START, late_ratio=0.3)


async def test_a_backlog_of_both_inputs_is_joined_in_event_time_order(broker, worker_factory):
    names = make_names(broker.url, retention_ms=60_000)
    records = backlog()
    await send(names, records)
    worker_factory(names).wait_ready()
    expected = exact_mood_answer(records)
    revs = await wait_converged(names, expected, timeout_s=120)
    assert answers(revs) == expected, diff(answers(revs), expected)
    fates = await fates_of(names)
    assert not fates.late and not fates.dead


async def test_without_flow_control_the_same_backlog_turns_records_late(broker, worker_factory):
    names = make_names(broker.url, retention_ms=60_000)
    records = backlog()
    await send(names, records)
    worker_factory(names, flow_control="false").wait_ready()

    async def late():
        return await read_all(names, names.late_topic, idle_s=1.5)

    assert await wait_for(late, timeout_s=60), "no record went late without flow control"

"""A rebalance and a stop wait for the batches in flight and nothing else
(``EtjApp._consumer_wait_empty``).

Faust waits, before it gives partitions up or stops, until every record it delivered to an
agent is acked. Records flow control holds back, waiting for another input to catch up in event
time, are unacked on purpose: before the batch hand-over, that wait lasted minutes (the
10-minute chaos run: a worker waited on one held mood, the group never settled) and needed
three patches (a revoke hook, a bounded stop, a flush of half-built batches). Now what waits in
a loop's inbox or in flow control is let go — read again from the committed offsets — and only
batches on their way to the broker are awaited; on a stop, at most ``ETJ_STOP_DRAIN_S``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from app.agents.event_join import engines
from app.faust_app import app
from app.inputs.inbox import Batch
from app.joins.keys import version_key
from app.loop import pipeline
from tests.agent.conftest import Record

T = 1_790_000_000_000
log = logging.getLogger(__name__)


def mood(name: str, t: int) -> dict[str, Any]:
    return {"name": "ann", "mood": name, "event_time": t}


def held(engine: Any) -> int:
    return engine.loop.merge.waiting()


def lagging(engine: Any, partition: int | None = None) -> Any:
    """The events input looks as if the broker held more of it: moods wait for it."""
    return mock.patch.object(
        engine.loop.merge,
        "lag",
        lambda topic, p, offset: (
            topic == engine.spec.events.topic and (partition is None or p == partition)
        ),
    )


@contextmanager
def commits() -> Iterator[list[Any]]:
    """The consumer's commit, recorded (no broker)."""
    done: list[Any] = []

    async def commit(*args: Any, **kwargs: Any) -> bool:
        done.append(dict(app.consumer._acked_end))
        return True

    with mock.patch.object(app.consumer, "commit_and_end_transactions", commit):
        yield done


async def test_a_rebalance_does_not_wait_for_a_record_flow_control_holds(join_harness):
    async with join_harness("moods") as h:
        engine = engines["moods"]
        with lagging(engine), commits() as done:
            await h.dimension(mood("calm", T), offset=41)
            assert held(engine) == 1  # the mood waits for the lagging events input
            # and a fetch waits in the inbox, not handled yet
            engine.loop.inbox.put(
                Batch(
                    engine.spec.dimension.topic,
                    0,
                    [Record(engine.spec.dimension.topic, 0, 42, b"ann", b"{}", 0)],
                    None,
                    0,
                )
            )
            await asyncio.wait_for(app._consumer_wait_empty(app.consumer, log), timeout=5)
            assert held(engine) == 0 and engine.loop.inbox.waiting() == 0
            assert h.outputs() == []  # not handled: they come again after the rebalance
            assert done, "what was acked is committed"
            assert all(
                tp.partition != 0 or tp.topic != engine.spec.dimension.topic for tp in done[-1]
            ), "nothing of the held records is acked"


async def test_a_rebalance_waits_for_a_batch_on_its_way_to_the_broker(join_harness):
    async with join_harness("moods"):
        engine = engines["moods"]
        broker = asyncio.get_running_loop().create_future()
        fake = pipeline.send_records

        async def slow(app_: Any, records: Any, **kw: Any) -> Any:
            sent = await fake(app_, records, **kw)
            if kw.get("refusable"):  # the outputs: the broker answers when the test says
                sent.futures = [(broker, idx) for _, idx in sent.futures]
            return sent

        with mock.patch.object(pipeline, "send_records", slow), commits() as done:
            engine.loop.pipeline.start()
            unit = engine.loop.handle(
                [
                    Batch(
                        engine.spec.events.topic,
                        0,
                        [
                            Record(
                                engine.spec.events.topic,
                                0,
                                7,
                                b"ann",
                                b'{"consultant": "ann", "recommendation": "tea", "event_time": 5}',
                                0,
                            )
                        ],
                        None,
                        app.consumer_generation_id,
                    )
                ]
            )
            await engine.loop.pipeline.hand_over(unit)
            waiting = asyncio.ensure_future(app._consumer_wait_empty(app.consumer, log))
            await asyncio.sleep(0.2)
            assert not waiting.done() and engine.loop.in_flight == 1
            broker.set_result(None)
            await asyncio.wait_for(waiting, timeout=5)
            assert engine.loop.in_flight == 0
            committed = {(tp.topic, tp.partition): end for tp, end in done[-1].items()}
            assert committed[(engine.spec.events.topic, 0)] == 8


async def test_a_stop_waits_at_most_the_drain_for_a_batch_in_flight(join_harness):
    async with join_harness("moods"):
        engine = engines["moods"]
        never = asyncio.get_running_loop().create_future()
        fake = pipeline.send_records

        async def stuck(app_: Any, records: Any, **kw: Any) -> Any:
            sent = await fake(app_, records, **kw)
            if kw.get("refusable"):
                sent.futures = [(never, idx) for _, idx in sent.futures]
            return sent

        with (
            mock.patch.object(pipeline, "send_records", stuck),
            commits() as done,
            mock.patch.object(type(app), "should_stop", True, create=True),
            mock.patch.object(app.etj, "stop_drain_s", 0.3),
        ):
            engine.loop.pipeline.start()
            unit = engine.loop.handle(
                [
                    Batch(
                        engine.spec.events.topic,
                        1,
                        [
                            Record(
                                engine.spec.events.topic,
                                1,
                                9,
                                b"ann",
                                b'{"consultant": "ann", "recommendation": "tea", "event_time": 5}',
                                0,
                            )
                        ],
                        None,
                        app.consumer_generation_id,
                    )
                ]
            )
            await engine.loop.pipeline.hand_over(unit)
            began = asyncio.get_running_loop().time()
            await asyncio.wait_for(app._consumer_wait_empty(app.consumer, log), timeout=5)
            assert asyncio.get_running_loop().time() - began < 2
            assert engine.loop.in_flight == 1  # left unacked: the next owner reads it again
            assert all((tp.topic, tp.partition) != (engine.spec.events.topic, 1) for tp in done[-1])
        never.cancel()


async def test_describe_says_what_a_loop_holds_and_where_its_tasks_wait(join_harness):
    """What the stall guard and a long rebalance wait log (app.loop.awaiting): found necessary when
    a chaos run's worker stopped handling records and its log said only 'stalled'."""
    async with join_harness("moods") as h:
        engine = engines["moods"]
        with lagging(engine):
            await h.dimension(mood("calm", T))
            await asyncio.sleep(0)  # the delivery's tasks start
            text = engine.loop.describe()
            assert text.startswith("join moods: ")
            assert "flow control holds 1 (partition -> lagging inputs waited for: {0: (" in text
            lines = dict(line.strip().split(": ", 1) for line in text.splitlines()[1:])
            assert {"deliver", "ack"} <= set(lines), text
            assert " _deliver -> " in lines["deliver"] and "waits on" in lines["deliver"]
            assert engine.loop in app.loops


async def test_a_held_record_let_go_later_keeps_its_own_partition(join_harness):
    """Flow control lets a held record go when its wait times out, in a later turn of the loop
    than the one that took it. Through Faust's tables a row's partition came from the
    *current* event: the 10-minute chaos run put a mood of partition 1 into partition 0's
    history and changelog (19 answers "no mood", never corrected). The overlays take the
    partition of the record being handled."""
    async with join_harness("moods") as h:
        engine = engines["moods"]
        t = h.tables
        with lagging(engine, partition=1):
            await h.dimension(mood("calm", T), partition=1)
            assert held(engine) == 1  # waits for partition 1's lagging events
            engine.loop.merge.partitions[1].waiting_since -= 60  # its wait timed out
            await h.tick(partition=0)  # the next turn of the loop lets it go
        assert held(engine) == 0
        vk = version_key("ann", T, ["calm"])  # the mood's own row (app.joins.keys)
        rows = [
            (p, k, v)
            for topic, p, k, v in h.sent.changelog
            if topic == t.joins.changelog_topic.get_topic_name() and k[:1] == b"V"
        ]
        assert rows == [(1, vk, b'[%d,"calm"]' % T)]
        assert t.joins.data.data[vk] == [T, "calm"]
        assert t.joins.data._key_partition[vk] == 1

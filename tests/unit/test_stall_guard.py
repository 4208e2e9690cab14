"""app.compat.stall_guard: reads again what Faust skipped, never what an agent merely holds.

Over Faust's consumer bookkeeping (its private fields, as the guard reads them), faked: the
offsets read, acked, committed; the fetch position and high watermark; the agents' buffers
(the conductor's channels) and the records taken and not acked. The tenth 10-minute chaos run
showed the need for the "busy" rules: the guard re-read every 20 s thousands of records a slow
agent already held and resumed partitions Faust had paused for back pressure, and the agent
never caught up.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from intervaltree import IntervalTree

from app.compat import log_gaps, stall_guard
from faust.types import TP

TP0 = TP("etj-moods", 0)
GEN = 7


@dataclass(frozen=True)
class Message:
    tp: Any
    offset: int
    generation_id: int


def message(offset: int, generation: int = GEN) -> Message:
    return Message(TP0, offset, generation)


class Consumer:
    def __init__(self, *, read: int, committed: int | None, acked: list[int], position: int,
                 highwater: int) -> None:
        self._read_offset = {TP0: read}
        self._committed_offset = {TP0: committed}
        self._acked = {TP0: acked}
        self._gap: dict[Any, IntervalTree] = defaultdict(IntervalTree)
        self._unacked_messages: set[Any] = set()
        self._buffered_partitions: set[Any] = set()
        self.active = {TP0}
        self._position, self._highwater = position, highwater
        self.seeks: list[int] = []
        self.resumed: list[Any] = []

    def assignment(self) -> set[Any]:
        return {TP0}

    def highwater(self, tp: Any) -> int:
        return self._highwater

    async def position(self, tp: Any) -> int:
        return self._position

    def _get_active_partitions(self) -> set[Any]:
        return self.active

    async def seek(self, tp: Any, offset: int) -> None:
        self.seeks.append(offset)

    def resume_partitions(self, tps: set[Any]) -> None:
        self.resumed += list(tps)
        self.active |= set(tps)


def make_app(consumer: Consumer, queued: list[Any] = ()) -> Any:
    channel = SimpleNamespace(_queue=SimpleNamespace(
        _queue=deque(SimpleNamespace(message=m) for m in queued)))
    return SimpleNamespace(consumer=consumer, consumer_generation_id=GEN,
                           tables=SimpleNamespace(changelog_topics=set()),
                           topics=SimpleNamespace(_topic_name_index={TP0.topic: [channel]}),
                           on_describe=[lambda: "join moods: (described)"])


@pytest.fixture(autouse=True)
def fresh_guard(monkeypatch):
    monkeypatch.setattr(log_gaps, "_skipped", defaultdict(IntervalTree))
    monkeypatch.setattr(stall_guard, "_suspects", {})
    monkeypatch.setattr(stall_guard, "_described", [0.0])


async def twice(app: Any) -> list[Any]:
    await stall_guard.check_stalls(app)
    return await stall_guard.check_stalls(app)


def tail() -> Consumer:
    """Read up to 99 (fetch position 100 = high watermark), handled up to 49."""
    return Consumer(read=99, committed=None, acked=list(range(50)), position=100, highwater=100)


@pytest.mark.asyncio
async def test_a_tail_read_and_never_delivered_is_read_again():
    consumer = tail()
    assert await twice(make_app(consumer)) == [TP0]
    assert consumer.seeks == [50]


@pytest.mark.asyncio
async def test_a_tail_waiting_in_the_agents_buffer_is_not_read_again(caplog):
    consumer = tail()
    app = make_app(consumer, queued=[message(o) for o in range(50, 100)])
    assert await twice(app) == []
    assert consumer.seeks == []
    # no progress between two checks: said, with what every agent is doing
    assert "inputs an agent holds and does not handle ['etj-moods[0] (50 records from 50" \
        in caplog.text and "join moods: (described)" in caplog.text


@pytest.mark.asyncio
async def test_a_tail_taken_by_the_agent_and_not_acked_is_not_read_again():
    consumer = tail()
    consumer._unacked_messages = {message(50)}  # held by flow control, or in a batch in flight
    assert await twice(make_app(consumer)) == []
    assert consumer.seeks == []


@pytest.mark.asyncio
async def test_records_of_an_earlier_generation_in_the_buffer_do_not_count():
    """Faust's stream skips them (not acked): they are lost unless read again."""
    consumer = tail()
    app = make_app(consumer, queued=[message(o, generation=GEN - 1) for o in range(50, 100)])
    assert await twice(app) == [TP0]
    assert consumer.seeks == [50]


@pytest.mark.asyncio
async def test_a_hole_is_read_again_unless_the_agent_holds_that_very_record():
    def hole() -> Consumer:  # 10 committed, never handled; 11.. handled
        return Consumer(read=30, committed=10, acked=list(range(11, 31)), position=31,
                        highwater=31)

    consumer = hole()
    later = make_app(consumer, queued=[message(40)])  # a later record waits: no excuse
    assert await twice(later) == [TP0] and consumer.seeks == [10]

    consumer = hole()
    consumer._unacked_messages = {message(10)}
    assert await twice(make_app(consumer)) == [] and consumer.seeks == []


@pytest.mark.asyncio
async def test_faust_back_pressure_is_left_alone_a_lost_resume_is_not():
    def paused() -> Consumer:
        c = Consumer(read=49, committed=None, acked=list(range(50)), position=50,
                     highwater=100)
        c.active = set()
        c._buffered_partitions = {TP0}  # Faust paused it: the agent's buffer is full
        return c

    consumer = paused()
    full = make_app(consumer, queued=[message(o) for o in range(50, 60)])
    assert await twice(full) == [] and consumer.resumed == []

    consumer = paused()  # the buffer drained and Faust never resumed it
    assert await twice(make_app(consumer)) == [TP0] and consumer.resumed == [TP0]


@pytest.mark.asyncio
async def test_a_position_being_reset_does_not_block_the_guard(monkeypatch):
    consumer = tail()

    async def never(tp: Any) -> int:
        await asyncio.Event().wait()
        return 0

    consumer.position = never
    monkeypatch.setattr(stall_guard, "POSITION_TIMEOUT_S", 0.05)
    assert await asyncio.wait_for(twice(make_app(consumer)), timeout=2) == []


@pytest.mark.asyncio
async def test_a_slow_agent_that_handles_records_between_checks_is_not_reported(caplog):
    consumer = tail()
    app = make_app(consumer, queued=[message(o) for o in range(60, 100)])
    consumer._unacked_messages = {message(o) for o in range(50, 60)}
    await stall_guard.check_stalls(app)
    consumer._acked[TP0] = list(range(60))  # it handled ten more meanwhile
    consumer._unacked_messages = set()
    assert await stall_guard.check_stalls(app) == []
    assert consumer.seeks == [] and "does not handle" not in caplog.text


def stuck_hole() -> Consumer:
    """10 committed and never handled, 11.. handled; nothing on its way."""
    return Consumer(read=30, committed=10, acked=list(range(11, 31)), position=31, highwater=31)


@pytest.mark.asyncio
async def test_a_hole_the_log_holds_is_read_again_as_long_as_it_stays_missing():
    """Never counted as handled on a guess: chaos run 21's lost ratings were records the log
    held, read past and never handed to the agent."""
    consumer = stuck_hole()
    app = make_app(consumer)
    for _ in range(3):
        await twice(app)
    assert consumer.seeks == [10, 10, 10]
    assert not consumer._gap[TP0]


@pytest.mark.asyncio
async def test_a_hole_the_log_does_not_hold_counts_as_handled_at_once(caplog):
    caplog.set_level("INFO", logger=stall_guard.__name__)
    consumer = stuck_hole()
    log_gaps.note_skipped(TP0, [(10, 11)])  # aiokafka read past it (a transaction marker)
    assert await stall_guard.check_stalls(make_app(consumer)) == []
    assert consumer.seeks == []
    assert [(i.begin, i.end) for i in consumer._gap[TP0]] == [(10, 11)]
    assert "offsets 10-10 are not in the log" in caplog.text

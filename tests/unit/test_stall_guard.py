"""app.loop.stall_guard: reads again what the consumer read past and never handed over, and
resumes what Faust left paused — never what an agent merely holds.

Over the consumer's bookkeeping, faked: the next offset to hand over, the fetch position and
high watermark, the active (fetched) partitions, the hand-over's own pause for a full inbox;
and the loops' inboxes, flow control and batches in flight. The tenth 10-minute chaos run
showed the need for the "busy" rule: a guard that re-read what a slow agent already held made
it hold the same records several times and never catch up.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from app.loop import stall_guard

TP0 = TP("etj-moods", 0)


class Consumer:
    def __init__(
        self,
        *,
        nxt: int | None,
        position: int,
        highwater: int,
        active: bool = True,
        held_back: bool = False,
    ) -> None:
        self._next, self._position, self._highwater = nxt, position, highwater
        self.active = {TP0} if active else set()
        self._held_back = held_back
        self.seeks: list[int] = []
        self.rewinds: list[int] = []
        self.resumed: list[Any] = []

    def input_partitions(self) -> list[Any]:
        return [TP0]

    def highwater(self, tp: Any) -> int:
        return self._highwater

    async def position(self, tp: Any) -> int:
        return self._position

    def next_offset(self, tp: Any) -> int | None:
        return self._next

    def held_back(self, tp: Any) -> bool:
        return self._held_back

    def fetching(self, tp: Any) -> bool:
        return tp in self.active

    async def seek(self, tp: Any, offset: int) -> None:
        self.seeks.append(offset)

    def rewound(self, tp: Any, offset: int) -> None:
        self.rewinds.append(offset)

    def resume_partitions(self, tps: set[Any]) -> None:
        self.resumed += list(tps)
        self.active |= set(tps)


def loop(holding: int = 0, join: str = "moods") -> Any:
    return SimpleNamespace(
        join=join,
        inbox=SimpleNamespace(waiting=lambda: holding, topics=(TP0.topic,)),
        merge=SimpleNamespace(waiting=lambda: 0),
        in_flight=0,
        describe=lambda: "join moods: (described)",
    )


def make_app(consumer: Consumer, holding: int = 0) -> Any:
    return SimpleNamespace(consumer=consumer, loops=[loop(holding)], producer=None)


@pytest.fixture(autouse=True)
def fresh():
    stall_guard._suspects.clear()
    yield
    stall_guard._suspects.clear()


async def twice(app: Any) -> list[Any]:
    assert await stall_guard.check_stalls(app) == []  # the first sighting only notes it
    return await stall_guard.check_stalls(app)


async def test_a_tail_read_and_never_handed_over_is_read_again():
    consumer = Consumer(nxt=40, position=50, highwater=50)  # 40-49 read, never handed over
    assert await twice(make_app(consumer)) == [TP0]
    assert consumer.seeks == [40] and consumer.rewinds == [40]


async def test_a_tail_the_agent_holds_is_not_read_again():
    consumer = Consumer(nxt=40, position=50, highwater=50)
    assert await twice(make_app(consumer, holding=10)) == []
    assert consumer.seeks == []


async def test_a_shared_tail_is_not_read_again_while_any_of_its_readers_holds_records():
    """Two joins read etj-moods: the fetch position is one for both, so a tail the second
    one still holds is not read again for the first (nor handed to both again)."""
    consumer = Consumer(nxt=40, position=50, highwater=50)
    app = make_app(consumer)
    app.loops.append(loop(holding=10, join="moods-2"))
    assert await twice(app) == []
    assert consumer.seeks == []
    app.loops[1] = loop(join="moods-2")  # both done: the tail read past is read again
    assert await twice(app) == [TP0]


async def test_a_partition_still_fetching_is_not_stalled():
    consumer = Consumer(nxt=50, position=50, highwater=80)
    assert await twice(make_app(consumer)) == []


async def test_a_paused_partition_with_records_waiting_is_resumed():
    consumer = Consumer(nxt=40, position=40, highwater=50, active=False)
    assert await twice(make_app(consumer)) == [TP0]
    assert consumer.resumed == [TP0] and consumer.seeks == []


async def test_the_hand_overs_own_back_pressure_is_left_alone():
    consumer = Consumer(nxt=40, position=40, highwater=50, active=False, held_back=True)
    assert await twice(make_app(consumer)) == []
    assert consumer.resumed == []


async def test_a_stall_seen_once_only_is_forgotten():
    consumer = Consumer(nxt=40, position=50, highwater=50)
    app = make_app(consumer)
    assert await stall_guard.check_stalls(app) == []
    consumer._next = 50  # handed over meanwhile
    assert await stall_guard.check_stalls(app) == []
    assert TP0 not in stall_guard._suspects and consumer.seeks == []


async def test_a_position_being_reset_does_not_block_the_guard(monkeypatch):
    consumer = Consumer(nxt=40, position=50, highwater=50)

    async def never(tp: Any) -> int:
        import asyncio

        await asyncio.Event().wait()
        return 0

    consumer.position = never  # type: ignore[method-assign]
    monkeypatch.setattr(stall_guard, "POSITION_TIMEOUT_S", 0.05)
    assert await twice(make_app(consumer)) == []

"""app.inputs.inbox: batches wait for their loop in arrival order; a partition past its bound is
paused and resumed once its loop took enough of it."""

from __future__ import annotations

from unittest import mock

from app.inputs.inbox import Batch, Inbox


def batch(partition: int, n: int, first: int = 0) -> Batch:
    return Batch("t", partition, [mock.Mock(offset=first + i) for i in range(n)], None, 1)


async def test_a_turn_takes_whole_batches_up_to_the_bound_in_arrival_order():
    inbox = Inbox("x", ["t"])
    for b in (batch(0, 3), batch(1, 3), batch(0, 3, 3)):
        inbox.put(b)
    first = await inbox.take(max_records=4)  # whole batches: 3, then 3 more (under 4 before)
    assert [(b.partition, b.first) for b in first] == [(0, 0), (1, 0)]
    assert inbox.waiting() == 3
    assert [(b.partition, b.first) for b in await inbox.take()] == [(0, 3)]
    assert await inbox.take(timeout=0.01) == []


def test_a_partition_over_its_bound_is_paused_until_its_loop_takes_it():
    inbox = Inbox("x", ["t"])
    resumed = []
    inbox.on_drained = lambda topic, p: resumed.append((topic, p))
    with mock.patch.object(Inbox, "max_records", 5):
        assert not inbox.put(batch(0, 3))
        assert inbox.put(batch(0, 3, 3))  # 6 waiting: pause it
        assert not inbox.put(batch(1, 2))
        inbox.take_nowait(max_records=2)  # partition 0's first batch: 3 left, under the bound
        assert resumed == [("t", 0)]
        inbox.take_nowait()
        assert resumed == [("t", 0)] and inbox.waiting() == 0


def test_a_rebalance_drops_what_waits():
    inbox = Inbox("x", ["t"])
    inbox.put(batch(0, 4))
    assert inbox.clear() == 4 and inbox.take_nowait() == []

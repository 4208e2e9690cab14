"""app.compat.consumer: the fetch loop's hand-over to the agents' inboxes, and commits by
acked range — on the worker's own consumer (not started: no broker), its fetch results made
of aiokafka's ConsumerRecords."""

from __future__ import annotations

from collections import defaultdict
from unittest import mock

import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP
from intervaltree import IntervalTree

from app.compat import log_gaps
from app.compat.consumer import EtjConsumer
from app.faust_app import app
from app.inputs.inbox import Inbox

INPUT = TP("t-input", 0)
CHANGELOG = TP("t-changelog", 1)


def records(tp: TP, offsets: range | list[int]) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(tp.topic, tp.partition, o, 0, 0, b"k", b"{}", None, 1, 2, [])
        for o in offsets
    ]


@pytest.fixture
def consumer():
    c = app.consumer
    assert isinstance(c, EtjConsumer)
    inbox = Inbox("test", [INPUT.topic])
    saved = dict(c.inboxes)
    c.route(inbox)
    seeks: list[tuple[TP, int]] = []
    with (
        mock.patch.object(log_gaps, "_skipped", defaultdict(IntervalTree)),
        mock.patch.object(type(c), "highwater", lambda self, tp: 500),
        mock.patch.object(c._thread, "seek", lambda tp, o: seeks.append((tp, o))),
        mock.patch.object(c, "assignment", lambda: {INPUT, CHANGELOG}),
    ):
        c._next.clear()
        c._acked_end.clear()
        c._acked_by.clear()
        c._committed_offset.pop(INPUT, None)
        c.seeks = seeks
        c.test_inbox = inbox
        yield c
    c.inboxes.clear()
    c.inboxes.update(saved)
    c._next.clear()
    c._acked_end.clear()
    c._acked_by.clear()
    c._held_back.clear()


async def test_an_input_partitions_records_go_to_its_inbox_as_one_batch(consumer):
    delivered = []

    async def callback(message):  # the conductor's: changelog records only
        delivered.append((message.tp, message.offset))

    with mock.patch.object(consumer, "callback", callback):
        await consumer._hand_over(
            {INPUT: records(INPUT, range(10, 13)), CHANGELOG: records(CHANGELOG, range(5, 7))}
        )
    [batch] = consumer.test_inbox.take_nowait()
    assert (batch.topic, batch.partition, batch.first, batch.end, batch.highwater) == (
        INPUT.topic,
        0,
        10,
        13,
        500,
    )
    assert [r.offset for r in batch.records] == [10, 11, 12]
    assert delivered == [(CHANGELOG, 5), (CHANGELOG, 6)]  # one by one, the recovery path


async def test_a_batch_that_skips_records_is_not_handed_over_and_they_are_read_again(consumer):
    await consumer._hand_over({INPUT: records(INPUT, range(10, 13))})
    await consumer._hand_over({INPUT: records(INPUT, range(20, 22))})  # 13-19 never came
    assert [b.first for b in consumer.test_inbox.take_nowait()] == [10]
    assert consumer.seeks == [(INPUT, 13)]
    await consumer._hand_over({INPUT: records(INPUT, range(13, 22))})  # read again: follows
    assert [(b.first, b.end) for b in consumer.test_inbox.take_nowait()] == [(13, 22)]


async def test_a_jump_over_offsets_the_log_does_not_hold_is_followed(consumer):
    await consumer._hand_over({INPUT: records(INPUT, range(10, 13))})
    log_gaps.note_skipped(INPUT, [(13, 15)])  # a transaction marker, a compacted record
    await consumer._hand_over({INPUT: records(INPUT, range(15, 17))})
    assert [b.first for b in consumer.test_inbox.take_nowait()] == [10, 15]
    assert consumer.seeks == []


async def test_the_first_batch_must_start_at_the_committed_offset(consumer):
    consumer._committed_offset[INPUT] = 40
    await consumer._hand_over({INPUT: records(INPUT, range(45, 50))})  # 40-44 lost on the way
    assert consumer.test_inbox.take_nowait() == [] and consumer.seeks == [(INPUT, 40)]


async def test_a_full_inbox_stops_the_fetch_of_its_partition_until_it_drains(consumer):
    active = consumer._get_active_partitions()
    active.add(INPUT)
    with mock.patch.object(Inbox, "max_records", 5):
        await consumer._hand_over({INPUT: records(INPUT, range(6))})
        assert INPUT not in active and consumer.held_back(INPUT)
        consumer.test_inbox.take_nowait()  # the loop takes what waits: fetch it again
    assert INPUT in active and not consumer.held_back(INPUT)
    consumer._get_active_partitions()  # Faust asserts its set holds its TPs only (a crash)


async def test_batches_fetched_while_a_rebalance_begins_are_dropped(consumer):
    consumer.flow_active = False  # Faust stops the flow first thing in a rebalance
    try:
        await consumer._hand_over({INPUT: records(INPUT, range(3))})
    finally:
        consumer.flow_active = True
    assert consumer.test_inbox.take_nowait() == []


def test_no_commit_passes_a_record_in_flight_faust_606(consumer):
    """faust-streaming#606: committed 2585, the record at 2585 still being processed, 2586-2589
    acked: Faust commits 2590 and the record at 2585 is never processed after a restart. Here
    the commit waits at 2585 until it is acked."""
    consumer._committed_offset[INPUT] = 2585
    consumer.ack_range(INPUT, 2586, 2590, "test")
    assert consumer._new_offset(INPUT) == 2585
    assert not consumer._should_commit(INPUT, consumer._new_offset(INPUT))
    consumer.ack_range(INPUT, 2585, 2586, "test")
    assert consumer._new_offset(INPUT) == 2586  # the later range came before it: read again
    consumer.ack_range(INPUT, 2586, 2590, "test")
    assert consumer._new_offset(INPUT) == 2590
    assert INPUT in list(consumer._filter_tps_with_pending_acks())


async def test_an_assignment_forgets_every_acked_range(consumer):
    consumer.ack_range(INPUT, 0, 10, "test")
    with mock.patch(
        "faust.transport.drivers.aiokafka.Consumer.on_partitions_assigned", mock.AsyncMock()
    ):
        await consumer.on_partitions_assigned({INPUT})
    assert consumer.acked_end(INPUT) is None

"""One topic, several joins (app.compat.consumer): the fetch loop hands a shared partition's
batch to every loop that reads it, holds the partition for all of them while one has too many
of its records, and commits it up to the least of what they acked — on the worker's own
consumer (not started: no broker), its fetch results made of aiokafka's ConsumerRecords.

Scenario: joins ``a`` and ``b`` both read ``t-shared`` (two specs enriching one event topic).
"""

from __future__ import annotations

from collections import defaultdict
from unittest import mock

import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP
from intervaltree import IntervalTree

from app.compat import log_gaps
from app.compat.consumer import EtjConsumer, least_end
from app.faust_app import app
from app.inputs.inbox import Inbox

SHARED = TP("t-shared", 0)


def records(tp: TP, offsets: range) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(tp.topic, tp.partition, o, 0, 0, b"k", b"{}", None, 1, 2, [])
        for o in offsets
    ]


@pytest.fixture
def consumer():
    c = app.consumer
    assert isinstance(c, EtjConsumer)
    a, b = Inbox("a", [SHARED.topic]), Inbox("b", [SHARED.topic])
    saved = dict(c.inboxes)
    c.route(a)
    c.route(b)
    with (
        mock.patch.object(log_gaps, "_skipped", defaultdict(IntervalTree)),
        mock.patch.object(type(c), "highwater", lambda self, tp: 500),
        mock.patch.object(c, "assignment", lambda: {SHARED}),
    ):
        c._next.clear()
        c._acked_end.clear()
        c._acked_by.clear()
        c._committed_offset.pop(SHARED, None)
        c.a, c.b = a, b
        yield c
    c.inboxes.clear()
    c.inboxes.update(saved)
    c._next.clear()
    c._acked_end.clear()
    c._acked_by.clear()
    c._held_back.clear()
    c._committed_offset.pop(SHARED, None)


# --- the fan-out -------------------------------------------------------------------------------


async def test_a_shared_partitions_batch_goes_to_every_reader(consumer):
    await consumer._hand_over({SHARED: records(SHARED, range(10, 13))})
    await consumer._hand_over({SHARED: records(SHARED, range(13, 15))})
    for inbox in (consumer.a, consumer.b):
        assert [(b.first, b.end) for b in inbox.take_nowait()] == [(10, 13), (13, 15)]


def test_an_agent_routed_again_is_one_reader_and_two_readers_of_a_topic_need_two_names(
    consumer,
):
    consumer.route(consumer.a)  # a restarted agent
    assert consumer.inboxes[SHARED.topic] == [consumer.a, consumer.b]
    with pytest.raises(ValueError, match="two readers of t-shared are named 'a'"):
        consumer.route(Inbox("a", [SHARED.topic]))


# --- commit the least --------------------------------------------------------------------------


def test_a_shared_partition_is_committed_up_to_what_every_reader_acked(consumer):
    consumer._committed_offset[SHARED] = 10
    consumer.ack_range(SHARED, 10, 20, "a")
    assert consumer._new_offset(SHARED) == 10  # b has handled nothing yet
    assert not consumer._should_commit(SHARED, consumer._new_offset(SHARED))
    consumer.ack_range(SHARED, 10, 15, "b")
    assert consumer._new_offset(SHARED) == 15
    consumer.ack_range(SHARED, 15, 30, "b")
    assert consumer._new_offset(SHARED) == 20  # now a is behind
    consumer.ack_range(SHARED, 20, 25, "a")
    assert consumer._new_offset(SHARED) == 25
    assert SHARED in list(consumer._filter_tps_with_pending_acks())


def test_a_readers_hole_holds_the_commit_for_every_reader(consumer):
    """faust-streaming#606 per reader: b acks past a record it has not handled (flow control
    still holds it): the commit waits at that record, whatever a acked."""
    consumer._committed_offset[SHARED] = 10
    consumer.ack_range(SHARED, 10, 30, "a")
    consumer.ack_range(SHARED, 12, 30, "b")  # 10 and 11 not handled by b
    assert consumer._new_offset(SHARED) == 10
    consumer.ack_range(SHARED, 10, 12, "b")
    assert consumer._new_offset(SHARED) == 12  # the later range came first: read again
    consumer.ack_range(SHARED, 12, 30, "b")
    assert consumer._new_offset(SHARED) == 30


def test_with_nothing_committed_a_reader_that_acked_nothing_holds_the_commit(consumer):
    consumer.ack_range(SHARED, 0, 5, "a")
    assert consumer.acked_end(SHARED) is None  # b may not have handled offset 0
    consumer.ack_range(SHARED, 0, 3, "b")
    assert consumer.acked_end(SHARED) == 3


def test_the_commit_point_is_the_least_acked_end_and_unknown_if_one_is():
    assert least_end([7]) == 7  # one reader: what it acked
    assert least_end([7, 3, 12]) == 3
    assert least_end([7, 3, 12]) == 3
    assert least_end([7, None]) is None
    assert least_end([]) is None


async def test_an_assignment_forgets_what_every_reader_acked_and_held(consumer):
    consumer._committed_offset[SHARED] = 0
    await consumer._hand_over({SHARED: records(SHARED, range(5))})
    consumer.ack_range(SHARED, 0, 5, "a")
    consumer.ack_range(SHARED, 0, 3, "b")
    with mock.patch(
        "faust.transport.drivers.aiokafka.Consumer.on_partitions_assigned", mock.AsyncMock()
    ):
        await consumer.on_partitions_assigned({SHARED})
    assert consumer.acked_end(SHARED) is None and not consumer._acked_by
    # every reader reads again from the committed offset: what waited is dropped
    assert consumer.a.take_nowait() == [] and consumer.b.take_nowait() == []


# --- back pressure -------------------------------------------------------------------------------


async def test_one_readers_full_inbox_holds_the_partition_for_all_until_it_drains(consumer):
    active = consumer._get_active_partitions()
    active.add(SHARED)
    with mock.patch.object(Inbox, "max_records", 5):
        await consumer._hand_over({SHARED: records(SHARED, range(6))})
        assert SHARED not in active and consumer.held_back(SHARED)
        consumer.b.take_nowait()  # b took its records: a still holds six
        assert SHARED not in active and consumer.held_back(SHARED)
        consumer.a.take_nowait()  # and now a
    assert SHARED in active and not consumer.held_back(SHARED)
    consumer._get_active_partitions()  # Faust asserts its set holds its TPs only (a crash)


def test_flow_control_holds_are_per_reader(consumer):
    active = consumer._get_active_partitions()
    active.add(SHARED)
    consumer.hold(SHARED, "flow a")
    consumer.hold(SHARED, "flow b")
    consumer.let_go(SHARED, "flow a")
    assert SHARED not in active  # b's flow control still holds too many of its records
    consumer.let_go(SHARED, "flow b")
    assert SHARED in active and not consumer.held_back(SHARED)


# --- at start: each join's co-partitioning ------------------------------------------------------


def test_a_shared_topic_is_held_to_each_of_its_joins_partition_count():
    """A topic several joins read is in each join's co-partitioned group: a join whose count
    it does not have is refused at start, by name."""
    from app.joins.catalog import movie_spec
    from app.joins.resolve import copartition_groups, resolve_all
    from app.kafka.copartition import CopartitionError, check_groups
    from app.settings import Settings

    movies = movie_spec(Settings())
    films = {
        **movies,
        "name": "films",
        "output": "etj-films",
        "ticks": "etj-film-ticks",
        "tables": None,
        "partitions": 8,
    }  # on the same ratings and movies
    specs = resolve_all([movies, films])
    groups = [
        (f"join {s.name!r}", g, s.partitions or 4) for s, g in zip(specs, copartition_groups(specs))
    ]
    counts = {"etj-ratings": 4, "etj-movies": 4, "etj-movie-ticks": 4, "etj-film-ticks": 8}
    with pytest.raises(CopartitionError) as exc:
        check_groups(counts, groups)
    assert (
        "join 'films': co-partitioned topics etj-ratings, etj-movies, etj-film-ticks must have 8"
        in str(exc.value)
    )
    assert "join 'movies'" not in str(exc.value)

"""aiokafka's own ``Fetcher.fetched_records`` hands over nothing of the partitions Faust has
paused, even when it has paused them all (app.compat.consumer_thread.EtjConsumerThread._fetch_records)."""

from __future__ import annotations

import asyncio
import contextlib
import types
from types import SimpleNamespace

from aiokafka.consumer.fetcher import Fetcher, FetchResult
from faust.types import TP

from app.compat.consumer_thread import ActiveView, EtjConsumerThread

CHANGELOG = TP("t-etj-movies-dimension-changelog", 0)
INPUT = TP("t-etj-moods", 1)


class Records:
    """What FetchResult reads of aiokafka's PartitionRecords: iteration and the next offset."""

    def __init__(self, first: int, last: int) -> None:
        self._offsets = iter(range(first, last + 1))
        self.next_fetch_offset = first

    def __iter__(self):
        return self

    def __next__(self):
        offset = next(self._offsets)
        self.next_fetch_offset = offset + 1
        return SimpleNamespace(offset=offset)


class State:
    def __init__(self, position: int) -> None:
        self.position, self.paused = position, False

    def consumed_to(self, offset: int) -> None:
        self.position = offset


def prefetched() -> tuple[SimpleNamespace, dict]:
    """A fetcher holding prefetched records of a standby changelog (0..56) and an input."""
    states = {CHANGELOG: State(0), INPUT: State(437)}
    assignment = SimpleNamespace(active=True, state_value=states.__getitem__)
    fetcher = SimpleNamespace(
        _subscriptions=SimpleNamespace(
            reassignment_in_progress=False,
            is_assigned=lambda tp: True,
            fetch_context=contextlib.nullcontext,
        ),
        _records={
            tp: FetchResult(tp, assignment=assignment, partition_records=Records(*span), backoff=0)
            for tp, span in ((CHANGELOG, (0, 56)), (INPUT, (437, 1529)))
        },
        _notify=lambda future: None,
        _wait_consume_future=None,
        _closed=False,
    )
    fetcher.fetched_records = types.MethodType(Fetcher.fetched_records, fetcher)
    return fetcher, states


def fetch(active: set | None) -> tuple[dict, dict]:
    """Faust's ``_fetch_records`` (patched) with its live set of active partitions."""
    fetcher, states = prefetched()
    thread = SimpleNamespace(consumer=SimpleNamespace(flow_active=True))
    consumer = SimpleNamespace(_fetcher=fetcher, _closed=False)
    got = asyncio.run(EtjConsumerThread._fetch_records(thread, consumer, active, timeout=0))
    return {tp: [r.offset for r in rs] for tp, rs in got.items()}, {
        tp: s.position for tp, s in states.items()
    }


def test_upstream_hands_over_every_partition_when_faust_has_paused_them_all():
    fetcher, states = prefetched()
    got = asyncio.run(fetcher.fetched_records(set(), timeout=0))  # what Faust passed
    assert set(got) == {CHANGELOG, INPUT}  # Faust then drops them as records of paused ones
    assert states[CHANGELOG].position == 57 and states[INPUT].position == 1530


def test_with_every_partition_paused_nothing_is_handed_over_and_positions_stay():
    got, positions = fetch(set())
    assert got == {}
    assert positions == {CHANGELOG: 0, INPUT: 437}


def test_the_active_partitions_are_handed_over_and_the_paused_ones_kept():
    got, positions = fetch({CHANGELOG})
    assert got == {CHANGELOG: list(range(57))}
    assert positions == {CHANGELOG: 57, INPUT: 437}


def test_the_set_is_read_live_and_client_only_mode_is_left_alone():
    live: set = set()
    view = ActiveView(live)
    assert view and INPUT not in view  # never "empty" to aiokafka
    live.add(INPUT)  # Faust resumes a partition while aiokafka waits
    assert INPUT in view and list(view) == [INPUT] and len(view) == 1
    got, _ = fetch(None)  # no set: every partition, as upstream
    assert set(got) == {CHANGELOG, INPUT}

"""app.compat.log_gaps: an offset counts as handled without being handled only if the log does
not hold it.

Chaos run 21 lost 202 ratings: Faust's consumer took a jump between the last offset it had read
and the next record it was given for a gap in the log, and counted the 201 offsets in between as
acked, though the broker had returned them (they never reached its read loop). These tests feed
aiokafka's own fetch result real record batches (one with a record compacted away, a transaction
marker between batches) and check what the hand-over and the commit of
:mod:`app.compat.consumer` accept across a jump, against Faust's gap rule.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from types import SimpleNamespace

import pytest
from aiokafka.consumer.fetcher import FetchResult, PartitionRecords
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition
from faust.transport.consumer import Consumer
from intervaltree import IntervalTree

from app.compat import log_gaps
from app.compat.consumer import extend, follows

TP = TopicPartition("etj-ratings", 2)


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    monkeypatch.setattr(log_gaps, "_skipped", defaultdict(IntervalTree))


def batch(base: int, deltas: list[int]) -> bytes:
    """A record batch at ``base`` holding the records at ``base + delta`` (a missing delta: a
    record compaction removed)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for delta in deltas:
        builder.append(delta, timestamp=1, key=b"k", value=b"v", headers=[])
    buf = builder.build()
    buf[0:8] = struct.pack(">q", base)  # the broker sets the base offset
    return bytes(buf)


def fetch_result(fetch_offset: int, data: bytes) -> FetchResult:
    """aiokafka's fetch result over ``data`` fetched at ``fetch_offset``, its partition
    assigned and consumed from there."""
    state = SimpleNamespace(paused=False, position=fetch_offset)
    state.consumed_to = lambda offset: setattr(state, "position", offset)
    assignment = SimpleNamespace(active=True, state_value=lambda tp: state)
    records = PartitionRecords(TP, MemoryRecords(data), [], fetch_offset, None, None, True, 0)
    return FetchResult(TP, assignment=assignment, partition_records=records, backoff=0)


#: offsets 10-12; 13 is not in the log (a transaction marker between the batches); 14; 15 was
#: compacted away; 16
LOG = batch(10, [0, 1, 2]) + batch(14, [0, 2])


def faust_consumer(committed: int | None) -> SimpleNamespace:
    return SimpleNamespace(
        _committed_offset=defaultdict(lambda: None, {TP: committed}),
        _gap=defaultdict(IntervalTree),
        _acked=defaultdict(list),
        _acked_index=defaultdict(set),
    )


def counted(consumer: SimpleNamespace) -> list[int]:
    return sorted(o for i in consumer._gap[TP] for o in range(i.begin, i.end))


def test_skipped_ranges():
    assert log_gaps.skipped_ranges(10, 17, [10, 11, 12, 14, 16]) == [(13, 14), (15, 16)]
    assert log_gaps.skipped_ranges(10, 20, []) == [(10, 20)]
    assert log_gaps.skipped_ranges(10, 13, [10, 11, 12]) == []


def test_a_fetch_notes_the_offsets_the_log_does_not_hold():
    out = log_gaps.getall(fetch_result(10, LOG))
    assert [r.offset for r in out] == [10, 11, 12, 14, 16]
    assert log_gaps.skipped_within(TP, 0, 100) == [(13, 14), (15, 16)]


def test_a_fetch_read_in_parts_notes_the_same():
    result = fetch_result(10, LOG)
    first = log_gaps.getall(result, 2)
    assert [r.offset for r in first] == [10, 11] and log_gaps.skipped_within(TP, 0, 100) == []
    rest = log_gaps.getall(result)
    assert [r.offset for r in rest] == [12, 14, 16]
    assert log_gaps.skipped_within(TP, 0, 100) == [(13, 14), (15, 16)]


def test_a_batch_after_a_marker_follows_the_last_one():
    log_gaps.getall(fetch_result(10, LOG))
    assert follows(TP, 13, 14)  # handed over up to 12, the next batch starts at 14
    assert extend(TP, 13, 14, 15) == 15  # and the commit passes 13


@pytest.mark.asyncio
async def test_records_the_broker_returned_are_never_passed_but_faust_counts_them():
    """Handed over up to 10, the next batch starts at 14: 11 and 12 were returned and dropped
    on the way (a fetch cut by a generation change, records in hand when the partition was
    seeked back). The hand-over refuses the batch and the commit stops at 11; Faust's gap rule
    counted 11-14 as acked."""
    log_gaps.getall(fetch_result(10, LOG))
    assert not follows(TP, 11, 14)
    assert extend(TP, 11, 14, 15) == 11
    faust = faust_consumer(committed=10)
    await Consumer._add_gap(faust, TP, 11, 14)
    assert counted(faust) == [11, 12, 13, 14]  # Faust's rule: 11-12 "acked", unhandled


def test_run_21_the_commit_stops_at_the_records_read_past():
    """The shape of chaos run 21: 11877 committed, not handled; 11878-12078 returned by the
    broker, never handed to the agent; 12079 on handled. When 11877 is handled, the commit
    must stop at 11878, not jump past the 201 unhandled records."""
    acked = extend(TP, 11877, 12079, 12100)  # the later records first: no commit past 11877
    assert acked == 11877
    assert extend(TP, acked, 11877, 11878) == 11878


def test_an_absent_offset_at_the_head_of_the_commit_does_not_stop_it():
    log_gaps.getall(fetch_result(10, LOG))
    assert extend(TP, 13, 14, 15) == 15  # read again from 13 (a seek): 13 is not in the log


def test_notes_below_the_committed_offset_are_forgotten():
    log_gaps.note_skipped(TP, [(13, 14), (15, 16)])
    log_gaps.forget_before(TP, 15)
    assert log_gaps.skipped_within(TP, 0, 100) == [(15, 16)]
    log_gaps.forget_before(TP, 16)
    assert TP not in log_gaps._skipped


def test_installed_over_aiokafka():
    log_gaps.install()
    assert FetchResult.getall is log_gaps.getall

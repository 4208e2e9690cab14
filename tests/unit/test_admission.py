"""app.inputs.admission: the door every parsed input record passes (Kafka's partitioner, records from
the future), checked against an independent murmur2 (tests.kafka_io, numpy) and the CRC32
partitioner librdkafka producers use by default."""

from __future__ import annotations

import random
import zlib
from collections import namedtuple

import pytest

from app.inputs.admission import check_partition, check_record, door
from tests.kafka_io import partitions_of

Record = namedtuple("Record", "key partition timestamp")
NOW = 1_800_000_000_000


@pytest.mark.parametrize("partitions", [1, 4, 12])
def test_a_record_where_kafkas_partitioner_puts_it_passes(partitions):
    rng = random.Random(partitions)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 21))) for _ in range(2_000)]
    for key, p in zip(keys, partitions_of(keys, partitions)):
        assert check_partition(key, p, partitions) is None
        if partitions > 1:
            assert check_partition(key, (p + 1) % partitions, partitions) is not None


def test_a_crc32_partitioned_record_is_refused_with_what_to_set_on_the_producer():
    keys = [f"user-{i}".encode() for i in range(1_000)]
    right = partitions_of(keys, 12)
    crc = [(zlib.crc32(k) & 0xFFFFFFFF) % 12 for k in keys]  # librdkafka's consistent_random
    wrong = [(k, c) for k, c, r in zip(keys, crc, right) if c != r]
    assert len(wrong) > 800  # most keys land elsewhere: the join would split them
    key, p = wrong[0]
    reason = check_partition(key, p, 12)
    assert reason is not None and f"is in partition {p}" in reason
    assert "partitioner=murmur2_random" in reason and "CRC32" in reason


def test_no_key_or_no_partition_count_is_not_judged():
    assert check_partition(None, 3, 4) is None
    assert check_partition(b"ann", 3, None) is None
    assert check_partition(b"ann", 3, 0) is None


def test_the_door_refuses_by_rule_and_lets_the_past_through():
    [p] = partitions_of([b"ann"], 4)
    ok = Record(b"ann", p, NOW)
    assert check_record(ok, NOW - 10**12, 4, NOW, 300_000) is None  # a backfill: the past
    assert check_record(ok, NOW + 300_000, 4, NOW, 300_000) is None  # exactly the tolerance
    rule, reason = check_record(ok, NOW + 300_001, 4, NOW, 300_000)
    assert rule == "future" and "ahead" in reason
    # a producer whose clock runs ahead stamps ahead too: the wall clock bounds it
    skewed = Record(b"ann", p, NOW + 10**9)
    assert check_record(skewed, NOW + 10**9, 4, NOW, 300_000)[0] == "future"
    wrong = Record(b"ann", (p + 1) % 4, NOW)
    assert check_record(wrong, NOW, 4, NOW, 300_000)[0] == "partitioner"
    assert check_record(wrong, NOW, 4, NOW, 300_000, check_partitioner=False) is None


def test_the_door_of_a_batch_judges_as_the_rules_do():
    """door (made once per batch, fast path inlined) == check_record, record by record."""
    rng = random.Random(7)
    keys = [f"k{i}".encode() for i in range(300)] + [None]
    for partitions in (None, 1, 4):
        for check in (True, False):
            for partition in range(4):
                judge = door(partition, partitions, NOW, 300_000, check)
                for key in keys:
                    ts = rng.choice([NOW, NOW - 10**6, NOW + 10**7, -1])
                    t = rng.choice([NOW, NOW + 300_001, NOW - 10**9, ts + 300_000, ts + 300_001])
                    r = Record(key, partition, ts)
                    assert judge(r, t) == check_record(r, t, partitions, NOW, 300_000, check)

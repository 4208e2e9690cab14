"""tests.kafka_io.partitions_of: Kafka's murmur2 partitioner in numpy gives every key the
partition aiokafka gives it (the bench loads changelogs into the partitions a worker reads)."""

from __future__ import annotations

import random

import pytest

from tests.kafka_io import partition_of, partitions_of


@pytest.mark.parametrize("partitions", [1, 4, 7, 12])
def test_every_key_gets_aiokafkas_partition(partitions):
    rng = random.Random(partitions)
    keys = [
        bytes(rng.randrange(256) for _ in range(rng.randrange(0, 21))) for _ in range(3_000)
    ]  # every length 0-20: each tail of 0-3 bytes
    keys += [f"c{i:07d}".encode() for i in range(1_000)]  # bench.recovery's consultants
    assert partitions_of(keys, partitions) == [partition_of(k, partitions) for k in keys]
    assert len(set(partitions_of(keys, partitions))) == partitions  # all used, none beyond

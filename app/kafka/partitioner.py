"""Kafka's default partitioner: where a producer of the Java client (and aiokafka, and Faust)
puts a keyed record. The worker checks its inputs against it (each record at the door,
:mod:`app.inputs.admission`, and a sample of each input at start: :mod:`app.kafka.copartition`), sends
with it (:mod:`app.outputs.producer_batches`), and the bootstrap job places each catalogue key where the live
records of that key go (:mod:`app.batch.bootstrap`). No Faust import: Spark executors run it.
"""

from __future__ import annotations

from murmurhash2 import murmurhash2

__all__ = ["SEED", "partition_for"]

#: Kafka's murmur2 seed (the Java client's, aiokafka's)
SEED = 0x9747B28C


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` in a topic of ``partitions``."""
    return (murmurhash2(key, SEED) & 0x7FFFFFFF) % partitions

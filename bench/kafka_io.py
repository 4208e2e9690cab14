"""Fast producing and reading for benchmarks (aiokafka, no Faust).

The test harness sends one record per request, which is right for arrival-order scenarios and
far too slow to load hundreds of thousands of records. Here records are sent in producer
batches, with one twist for the local tansu broker: it under-reports end offsets as "first offset
of the newest batch + 1" (docs/contributing/tests.md), so :func:`produce_bulk` can send the last record of every
partition alone, in a batch of its own, which makes the reported end offset exact.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import TopicPartition

#: (topic, key bytes, value bytes | None) or the same + an explicit partition
Out = tuple[Any, ...]


def jbytes(value: Any) -> bytes:
    """A JSON value as compact UTF-8 bytes."""
    return json.dumps(value, separators=(",", ":")).encode()


_partitioner = DefaultPartitioner()


def partition_of(key: bytes, partitions: int) -> int:
    """The partition aiokafka (and Faust, and Java clients) choose for ``key``."""
    every = list(range(partitions))
    return int(_partitioner(key, every, every))


async def produce_bulk(bootstrap: str, records: Iterable[Out], partitions: int,
                       exact_end: bool = False, window: int = 20_000) -> int:
    """Send ``records`` (keyed, default partitioner) in large batches; return how many.

    ``exact_end``: hold back the last record of each (topic, partition) and send it alone after
    everything else is acknowledged, so tansu's end offset counts it (changelogs need this).
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                                max_batch_size=1 << 20, max_request_size=8 << 20)
    await producer.start()
    last: dict[tuple[str, int], Out] = {}
    sent = 0
    try:
        pending: list[asyncio.Future[Any]] = []
        for rec in records:
            tp = (rec[0], rec[3] if len(rec) > 3 else partition_of(rec[1] or b"", partitions))
            if exact_end:
                held = last.get(tp)
                last[tp] = rec
                if held is None:
                    continue
                rec = held
            topic, key, value = rec[:3]
            pending.append(await producer.send(topic, value, key=key, partition=tp[1]))
            sent += 1
            if len(pending) >= window:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        for (topic, p), (_, key, value, *_) in sorted(last.items()):
            await producer.send_and_wait(topic, value, key=key, partition=p)
            sent += 1
    finally:
        await producer.stop()
    return sent


@dataclass(frozen=True, slots=True)
class Got:
    """A record read back: where it was, when the broker stamped it, what it holds."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    received_s: float  # time.monotonic() when this reader got it

    def json(self) -> Any:
        return None if self.value is None else json.loads(self.value)


async def read_topics(bootstrap: str, topics: list[str], until: Callable[[list[Got]], bool],
                      timeout_s: float, idle_s: float | None = None,
                      from_end: bool = False) -> list[Got]:
    """Read ``topics`` from the beginning until ``until(records)`` holds (or idle/timeout)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=50,
                                max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    out: list[Got] = []
    try:
        tps = await assign_all(consumer, topics)
        if from_end:
            await consumer.seek_to_end(*tps)
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < deadline and not until(out):
            if idle_s is not None and time.monotonic() - last > idle_s:
                break
            batch = await consumer.getmany(timeout_ms=100, max_records=10_000)
            now = time.monotonic()
            for tp, msgs in batch.items():
                for m in msgs:
                    out.append(Got(tp.topic, tp.partition, m.offset, m.timestamp, m.key,
                                   m.value, now))
                    last = now
        return out
    finally:
        await consumer.stop()


async def assign_all(consumer: AIOKafkaConsumer, topics: list[str],
                     wait_s: float = 30.0) -> list[TopicPartition]:
    """Assign every partition of ``topics`` (waiting for them to exist) from the beginning."""
    deadline = time.monotonic() + wait_s
    tps: list[TopicPartition] = []
    for topic in topics:
        while True:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic)
            if parts:
                tps += [TopicPartition(topic, p) for p in sorted(parts)]
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} does not exist")
            await asyncio.sleep(0.2)
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return tps


async def create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    """Create topics (ignoring those that exist) so producers never race auto-creation."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for t in topics:
            try:
                await admin.create_topics([NewTopic(t, partitions, 1)])
            except TopicAlreadyExistsError:
                pass
    finally:
        await admin.close()

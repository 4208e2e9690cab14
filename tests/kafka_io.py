"""Fast producing and reading for the benchmarks and the chaos run (aiokafka, no Faust), and the
partitioner they load with: Kafka's murmur2, also in numpy (an implementation of its own, which
the unit tests hold app.inputs.admission's door to).

The test harness sends one record per request, which is right for arrival-order scenarios and
far too slow to load hundreds of thousands of records. Here records are sent in producer
batches, with one twist for the local tansu broker: it under-reports end offsets as "first offset
of the newest batch + 1" (docs/contributing/tests.md), so :func:`produce_bulk` can send the last
record of every partition alone, in a batch of its own, which makes the reported end offset exact.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import TopicPartition

#: (topic, key bytes, value bytes | None) or the same + an explicit partition
Out = tuple[Any, ...]


def jbytes(value: Any) -> bytes:
    """A JSON value as compact UTF-8 bytes."""
    return orjson.dumps(value)


_partitioner = DefaultPartitioner()


def partition_of(key: bytes, partitions: int) -> int:
    """The partition aiokafka (and Faust, and Java clients) choose for ``key``."""
    every = list(range(partitions))
    return int(_partitioner(key, every, every))


def partitions_of(keys: list[bytes], partitions: int) -> list[int]:
    """:func:`partition_of` for many keys at once: Kafka's murmur2 in numpy, one pass per key
    length (aiokafka's is pure Python, ~2.5 µs a key: 12 of the ~20 s a 5M-row load took)."""
    import numpy as np

    m, out = np.uint32(0x5BD1E995), [0] * len(keys)
    by_length: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(i)
    for length, at in by_length.items():
        data = np.frombuffer(b"".join(keys[i] for i in at), dtype=np.uint8).reshape(len(at), length)
        h = np.full(len(at), 0x9747B28C ^ length, dtype=np.uint32)
        whole = length // 4
        words = np.ascontiguousarray(data[:, : 4 * whole]).view("<u4").reshape(len(at), whole)
        for w in range(whole):
            k = words[:, w] * m
            k ^= k >> np.uint32(24)
            k *= m
            h *= m
            h ^= k
        tail, base = length % 4, 4 * whole
        if tail == 3:
            h ^= data[:, base + 2].astype(np.uint32) << np.uint32(16)
        if tail >= 2:
            h ^= data[:, base + 1].astype(np.uint32) << np.uint32(8)
        if tail >= 1:
            h ^= data[:, base].astype(np.uint32)
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
        for i, p in zip(at, ((h & np.uint32(0x7FFFFFFF)) % np.uint32(partitions)).tolist()):
            out[i] = p
    return out


async def produce_bulk(
    bootstrap: str,
    records: Iterable[Out],
    partitions: int,
    exact_end: bool = False,
    in_flight: int = 32,
) -> int:
    """Send ``records`` (keyed, default partitioner) in large batches; return how many.

    Batches of up to 1 MiB per partition are built here (aiokafka's ``create_batch`` /
    ``send_batch``: no future and no accumulator step per record, ~0.5 µs a record instead of
    ~10 µs through ``send``), at most ``in_flight`` of them unacknowledged; a partition's batches
    go in order, as ``send``'s would.

    ``exact_end``: hold back the last record of each (topic, partition) and send it alone after
    everything else is acknowledged, so tansu's end offset counts it (changelogs need this).
    """
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, max_batch_size=1 << 20, max_request_size=8 << 20
    )
    await producer.start()
    last: dict[tuple[str, int], Out] = {}
    filling: dict[tuple[str, int], Any] = {}
    pending: list[asyncio.Future[Any]] = []
    sent = 0

    async def ship(tp: tuple[str, int]) -> None:
        pending.append(await producer.send_batch(filling.pop(tp), tp[0], partition=tp[1]))
        if len(pending) >= in_flight:
            await asyncio.gather(*pending)
            pending.clear()

    try:
        for rec in records:
            tp = (rec[0], rec[3] if len(rec) > 3 else partition_of(rec[1] or b"", partitions))
            if exact_end:
                held = last.get(tp)
                last[tp] = rec
                if held is None:
                    continue
                rec = held
            key, value = rec[1], rec[2]
            batch = filling.get(tp)
            if batch is None:
                batch = filling[tp] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:  # full
                await ship(tp)
                batch = filling[tp] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
            sent += 1
        for tp in list(filling):
            await ship(tp)
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


async def read_topics(
    bootstrap: str,
    topics: list[str],
    until: Callable[[list[Got]], bool],
    timeout_s: float,
    idle_s: float | None = None,
    from_end: bool = False,
) -> list[Got]:
    """Read ``topics`` from the beginning until ``until(records)`` holds (or idle/timeout)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=4 << 20,
    )
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
                    out.append(
                        Got(tp.topic, tp.partition, m.offset, m.timestamp, m.key, m.value, now)
                    )
                    last = now
        return out
    finally:
        await consumer.stop()


async def assign_all(
    consumer: AIOKafkaConsumer, topics: list[str], wait_s: float = 30.0
) -> list[TopicPartition]:
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


async def topic_sizes(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Records each topic holds: the sum over its partitions of end − start offset. Exact on
    tansu only for topics written in one-record batches (it under-reports end offsets)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [
            TopicPartition(t, p)
            for t in topics
            for p in sorted(consumer.partitions_for_topic(t) or ())
        ]
        if not tps:
            return dict.fromkeys(topics, 0)
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        out = dict.fromkeys(topics, 0)
        for tp in tps:
            out[tp.topic] += ends[tp] - starts[tp]
        return out
    finally:
        await consumer.stop()


async def list_topics(bootstrap: str) -> set[str]:
    """Every topic the broker has."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        return set(await consumer.topics())
    finally:
        await consumer.stop()


class OutputWatch:
    """Read ``topics`` from the beginning in a background thread while something else runs,
    stamping each record with the wall-clock time (``time.time()``) this reader got it — the
    moment an output is readable, whatever clock its producer stamped it with. Counting what
    is read (not end offsets) is how a benchmark knows it is done on tansu with batching."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        import threading

        self.bootstrap, self.topics = bootstrap, topics
        self.got: list[tuple[float, Got]] = []  # (wall-clock receipt, record)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> OutputWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            asyncio.run(self._read())
        except BaseException as exc:  # surfaced by wait()
            self._error = exc

    async def _read(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=20,
            max_partition_fetch_bytes=4 << 20,
        )
        await consumer.start()
        try:
            await assign_all(consumer, self.topics, wait_s=600)
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=50, max_records=10_000)
                now, wall = time.monotonic(), time.time()
                self.got += [
                    (wall, Got(tp.topic, tp.partition, m.offset, m.timestamp, m.key, m.value, now))
                    for tp, msgs in batch.items()
                    for m in msgs
                ]
        finally:
            await consumer.stop()

    def wait(
        self,
        done: Callable[[list[Got]], bool],
        timeout_s: float,
        idle_s: float = 0.0,
        alive: Callable[[], None] | None = None,
    ) -> list[tuple[float, Got]]:
        """Wait until ``done(records)`` holds and then no record came for ``idle_s`` (late
        corrections); ``alive()`` may raise when the process being watched died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._error is not None:
                raise RuntimeError(f"output reader failed: {self._error!r}")
            got = list(self.got)
            if done([g for _, g in got]):
                if not idle_s or (got and time.time() - got[-1][0] >= idle_s):
                    return got
            if alive is not None:
                alive()
            time.sleep(0.05)
        raise TimeoutError(f"outputs not done in {timeout_s} s ({len(self.got)} read)")

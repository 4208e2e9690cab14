"""A batch's records produced a partition at a time: appended to aiokafka's batch builders,
one ``send_batch`` per (topic, partition) builder, in order.

Why: ``AIOKafkaProducer.send`` costs a metadata wait, a pure-Python murmur2, two futures and
an accumulator lookup per record (and Faust's ``Producer.send`` more on top); a minimal
batch-at-a-time join ran 17,226 records/s with one ``send`` per record and 50,836/s with the
batch builders (issue O). Here a loop's batch of changelog rows, or of outputs, becomes one
builder per partition (more when one fills up: :data:`BATCH_BYTES`, or
``ETJ_PRODUCER_MAX_BATCH_SIZE`` when set, so ``=1`` still gives the one-record batches the
test broker needs), and its records keep their order within each partition.

Partitioning is Kafka's default, as aiokafka's ``send`` does it: murmur2 of the key bytes
(the ``murmurhash2`` C extension; the same hash as aiokafka's pure-Python one, checked by
tests/unit/test_batch_send.py) modulo the topic's partition count; a record without a key goes
to a random available partition.

Failures keep the fail-stop rule of :mod:`app.outputs.delivery`: any record the broker does not
take ends the worker, committing nothing more — except, for outputs (``refusable``), a refusal
of the record itself (:func:`~app.outputs.delivery.refused_for_good`), which is handed back so
the loop can dead-letter the input that made it. A record over the producer's
``max_request_size`` is refused before it is appended (``send`` would have refused it too).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from aiokafka.producer.message_accumulator import BatchBuilder
from murmurhash2 import murmurhash2

from app.compat.producer import aiokafka_producer, request_limits, topic_partitions
from app.kafka.partitioner import SEED
from app.outputs import delivery

__all__ = ["Sent", "send_records"]

#: (topic, partition or None for the key's, key, value) of one record to produce; or with
#: (timestamp, headers) after them, for a record passed on as it came (a repartition hop)
Record = tuple[Any, ...]

#: a builder's capacity when ``ETJ_PRODUCER_MAX_BATCH_SIZE`` is not set. aiokafka's default
#: (16 KiB) suits records sent one at a time as they come; a loop hands over a whole batch at
#: once, and aiokafka sends one batch per partition per request, one request per broker at a
#: time: with 16 KiB builders a 5,000-record batch took ~15 round trips, one after the other.
#: librdkafka's default batch is 1 MB; this stays under the broker's default
#: ``message.max.bytes`` (1 MB) with room for the batch header.
BATCH_BYTES = 512 * 1024

#: the headers of a record that has none (aiokafka's builder reads them, never changes them)
NO_HEADERS: list[tuple[str, bytes]] = []


@dataclass(slots=True)
class Sent:
    """What was handed to the producer: one future per builder sent, with the indices (into
    the records given) of the records it holds; records refused before sending."""

    futures: list[tuple[Any, list[int]]] = field(default_factory=list)
    refused: list[tuple[int, BaseException]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.futures)

    async def wait(self) -> list[tuple[int, BaseException]]:
        """Until the broker has every record sent; the records refused for good (refusable
        sends only: any other failure has failed stop already), by index, in order."""
        refused = list(self.refused)
        for fut, indices in self.futures:
            try:
                await fut
            except Exception as exc:
                if not delivery.refused_for_good(exc):
                    delivery.fail_stop(f"a produced record was not delivered: {exc!r}")
                    raise
                refused += [(i, exc) for i in indices]
        return sorted(refused, key=lambda r: r[0])


async def send_records(
    app: Any, records: Sequence[Record], *, refusable: bool = False, on_sent: Any = None
) -> Sent:
    """Hand ``records`` to the producer, a builder per (topic, partition), in order.

    ``on_sent(topic, partition, count, future)``: called for each builder sent (the RocksDB
    tables remember the changelog offset their store holds)."""
    sent = Sent()
    if not records:
        return sent
    producer = aiokafka_producer(app)
    max_request, compression = request_limits(producer)
    configured = getattr(getattr(app, "etj", None), "producer_max_batch_size", None)
    capacity = configured if configured is not None else BATCH_BYTES

    def new_builder() -> Any:
        return BatchBuilder(capacity, compression, is_transactional=0)

    counts: dict[str, int] = {}
    #: (topic, partition) -> its builders, in order, each with the indices of its records
    per_tp: dict[tuple[str, int], list[tuple[Any, list[int]]]] = {}
    for i, record in enumerate(records):
        if len(record) == 4:
            topic, partition, key, value = record
            timestamp, headers = None, NO_HEADERS
        else:
            topic, partition, key, value, timestamp, headers = record
            headers = list(headers) if headers else NO_HEADERS  # the C builder wants a list
        if partition is None:
            n = counts.get(topic)
            if n is None:
                n = counts[topic] = await _partitions(producer, topic)
            partition = (
                (murmurhash2(key, SEED) & 0x7FFFFFFF) % n
                if key is not None
                else random.randrange(n)
            )
        size = (0 if key is None else len(key)) + (0 if value is None else len(value))
        if size > max_request:
            exc = MessageSizeTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the "
                f"maximum request size you have configured with the max_request_size "
                f"configuration"
            )
            if not refusable:
                delivery.fail_stop(
                    f"sending to {topic} failed: {exc!r}{delivery.row_hint(topic, exc)}"
                )
                raise exc
            sent.refused.append((i, exc))
            continue
        tp = (topic, partition)
        chain = per_tp.get(tp)
        if chain is None:
            chain = per_tp[tp] = [(new_builder(), [])]
        builder, indices = chain[-1]
        if (
            builder.append(key=key, value=value, timestamp=timestamp, headers=headers) is None
        ):  # full: a new one
            builder = new_builder()
            builder.append(
                key=key, value=value, timestamp=timestamp, headers=headers
            )  # the first always fits
            indices = []
            chain.append((builder, indices))
        indices.append(i)
    # Each partition's builders in order, the partitions side by side: aiokafka queues one
    # batch per partition until a request takes it (``add_batch`` waits meanwhile), and a
    # request takes one batch of every partition that has one. Sent one after the other, a
    # partition's second builder held back every later partition's first: with one-record
    # batches (ETJ_PRODUCER_MAX_BATCH_SIZE=1) a request carried one record.
    if len(per_tp) == 1:
        [(tp, chain)] = per_tp.items()
        await _send_chain(app, producer, sent, tp, chain, refusable, on_sent)
    else:
        await asyncio.gather(
            *(
                _send_chain(app, producer, sent, tp, chain, refusable, on_sent)
                for tp, chain in per_tp.items()
            )
        )
    return sent


async def _send_chain(
    app: Any,
    producer: Any,
    sent: Sent,
    tp: tuple[str, int],
    chain: list[tuple[Any, list[int]]],
    refusable: bool,
    on_sent: Any,
) -> None:
    for builder, indices in chain:
        await _send(app, producer, sent, tp[0], tp[1], builder, indices, refusable, on_sent)


async def _partitions(producer: Any, topic: str) -> int:
    parts = await topic_partitions(producer, topic)
    if not parts:
        raise KafkaError(f"no partitions known for topic {topic}")
    return len(parts)


async def _send(
    app: Any,
    producer: Any,
    sent: Sent,
    topic: str,
    partition: int,
    builder: Any,
    indices: list[int],
    refusable: bool,
    on_sent: Any,
) -> None:
    try:
        fut = await producer.send_batch(builder, topic, partition=partition)
    except KafkaError as exc:
        delivery.fail_stop(f"sending to {topic} failed: {exc!r}")
        raise
    delivery.watch(fut, topic, refusable=refusable)
    if on_sent is not None:
        on_sent(topic, partition, len(indices), fut)
    sent.futures.append((fut, indices))

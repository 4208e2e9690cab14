"""Faust's producer path: ``Topic.publish_message`` -> Faust's ``Producer`` (and its buffer) ->
aiokafka's ``AIOKafkaProducer`` and client. etj's subclasses and the one aiokafka gap it fills.

Every record etj produces (table changelogs, revisions, car moves, ticks, dead letters) is the
durable side of an input record that will be acked, so a send may be late but never lost. The
subclasses are wired through Faust's extension points: :class:`EtjProducer` is the transport's
``Producer`` (:class:`app.compat.consumer.EtjTransport`), :class:`EtjTopic` the app's ``Topic``
setting (``app.faust_app.create_app``). What a failed send does (fail-stop, or a refusal for
good handed back) is etj's own rule, in :mod:`app.outputs.delivery`; this module only reaches into
the libraries (and is where the batch path, :mod:`app.outputs.producer_batches`, reads aiokafka's producer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

import aiokafka
import aiokafka.errors
from aiokafka.errors import BrokerResponseError, KafkaError
from faust.exceptions import ProducerSendError
from faust.topics import Topic
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.transport.producer import ProducerBuffer
from faust.types import AppT

from app.compat.upstream import replaces
from app.runtime import fail_stop

__all__ = [
    "EtjProducer",
    "EtjProducerBuffer",
    "EtjTopic",
    "InvalidRecordError",
    "aiokafka_producer",
    "describe_producer",
    "register_broker_errors",
    "request_limits",
    "send_alone_batch",
    "topic_partitions",
    "track_every_topic",
    "with_delivery_timeout",
]


def with_delivery_timeout(
    producer: aiokafka.AIOKafkaProducer,
    delivery_timeout_s: float,
) -> aiokafka.AIOKafkaProducer:
    """Let ``producer``'s batches outlive a request timeout, up to ``delivery_timeout_s`` (never
    less than the request timeout): expiry and the wait to append both use it."""
    accumulator = producer._message_accumulator
    ttl = max(delivery_timeout_s, producer._request_timeout_ms / 1000)
    accumulator._batch_ttl = ttl
    add_message = accumulator.add_message

    async def add_message_within_ttl(
        tp: Any, key: Any, value: Any, timeout: float, **kwargs: Any
    ) -> Any:
        return await add_message(tp, key, value, ttl, **kwargs)

    accumulator.add_message = add_message_within_ttl
    return producer


def track_every_topic(producer: aiokafka.AIOKafkaProducer) -> aiokafka.AIOKafkaProducer:
    """Let ``producer``'s client track every topic a batch is sent to, even one whose
    partitions it already knows, so a refresh of the tracked topics never drops a topic a
    batch waits for (:meth:`EtjProducer._producer_type`)."""
    client = producer.client
    wait_on_metadata = client._wait_on_metadata

    async def wait_tracked(topic: str) -> Any:
        client._topics.add(topic)
        return await wait_on_metadata(topic)

    client._wait_on_metadata = wait_tracked
    return producer


class EtjProducer(aiokafka_driver.Producer):
    """Faust's aiokafka producer with etj's delivery timeout, topic tracking and buffer."""

    @replaces("faust.transport.producer:Producer.__init__", "ed712f88acbc")
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """The producer's buffer is etj's (:class:`EtjProducerBuffer`).

        Upstream: ``Producer.__init__`` creates Faust's ``ProducerBuffer``; no setting names
        its class.

        Symptom: Faust's buffer reads a setting through the registry for every record
        (:class:`EtjProducerBuffer` says what that cost).

        Test: tests/broker/test_delivery.py::test_the_worker_app_has_both_halves_installed

        Remove when: :class:`EtjProducerBuffer` goes.
        """
        super().__init__(*args, **kwargs)
        threaded = getattr(self.buffer, "threaded_producer", None)
        self.buffer = EtjProducerBuffer(loop=self.loop, beacon=self.beacon)
        if threaded is not None:
            self.buffer.threaded_producer = threaded
        self.buffer.app = self.app

    @property
    @replaces("faust.transport.drivers.aiokafka:Producer._producer_type", "1125698750a3")
    def _producer_type(self) -> Callable[..., aiokafka.AIOKafkaProducer]:  # type: ignore[override]  # a factory, where upstream's annotation says the class (its only use is a call)
        """aiokafka producers whose batches outlive a request timeout, and whose client keeps
        the leaders of every topic sent to.

        Upstream: aiokafka uses ONE setting, ``request_timeout_ms`` (Faust
        ``producer_request_timeout``), as the per-request timeout *and* as the age at which a
        batch expires unsent; and its client tracks for metadata only the topics it did not
        know at their first send (``AIOKafkaClient._wait_on_metadata``), so the first refresh
        for a newly tracked topic replaces the metadata with that topic's alone.

        Symptom: a broker that leaves a produce request unanswered that long expires the batch
        at the moment the request times out, and with one-record batches the next ``send``
        gives up (``KafkaTimeoutError``): nothing re-sent. And an untracked topic's partitions
        lost their leader: its waiting batch was never sent (seen in CI: a zone-pollution
        changelog row, NotLeaderForPartition after 10 s).

        Here a batch lives for ``ETJ_PRODUCER_DELIVERY_TIMEOUT_S`` (Kafka's
        ``delivery.timeout.ms``; never less than the request timeout), so a timed-out request is
        re-sent on a new connection, as is one refused as retriable; every topic sent to is
        tracked. A re-send may write a record twice: revisions, moves and changelog rows are
        idempotent. (Faust's factory property, overridden in this subclass; the two aiokafka
        changes are made on each producer it creates, aiokafka offering no hook.)

        Test: tests/broker/test_delivery.py::test_a_topic_known_before_its_first_send_keeps_its_leaders
        (and the delivery-timeout tests beside it; tests/broker/test_faults_stalled_broker.py)

        Remove when: aiokafka has a ``delivery_timeout_ms`` and keeps every sent-to topic in
        its metadata.
        """
        delivery_timeout_s = getattr(
            getattr(self.app, "etj", None), "producer_delivery_timeout_s", None
        )
        if delivery_timeout_s is None:
            return lambda **kw: track_every_topic(aiokafka.AIOKafkaProducer(**kw))
        return lambda **kw: track_every_topic(
            with_delivery_timeout(aiokafka.AIOKafkaProducer(**kw), delivery_timeout_s)
        )


@replaces(
    ("faust.transport.producer:ProducerBuffer.size", "4cf1044f773f"),
    ("faust.transport.producer:ProducerBuffer.put", "7716c9c980a0"),
)
class EtjProducerBuffer(ProducerBuffer):
    """The producer buffer reads Faust's ``producer_threaded`` setting once, not on every
    record.

    Upstream: ``ProducerBuffer.size`` and ``put`` read ``self.app.conf.producer_threaded``
    each time, through the settings registry's ``__getattribute__`` and a ``Param``
    descriptor. The conductor awaits ``wait_until_ebb()``, which reads ``size``, before it
    hands on every fetched record, and ``put`` runs for every message sent.

    Symptom: ``wait_until_ebb`` was 14 % of the main thread of a 1M-key RocksDB replay
    (py-spy ``--native``; 10 % in the settings lookup alone), and replay is bound by that
    thread.

    Here: the same two members, the setting read on first use and kept (it is fixed when the
    app is configured, before the producer exists).

    Test: tests/unit/test_producer_buffer.py::test_unthreaded_messages_wait_in_pending_and_the_setting_is_read_once

    Remove when: Faust's buffer stops reading the setting per record.
    """

    _etj_threaded: bool | None = None
    #: set by the producer when ``producer_threaded`` is on, the only case that reads it
    #: (annotation only, as upstream's): the aiokafka driver's, with its event queue
    threaded_producer: aiokafka_driver.ThreadedProducer

    def _threaded(self) -> bool:
        threaded = self._etj_threaded
        if threaded is None:
            # set by the producer right after it makes the buffer (upstream's cast, too)
            app = cast(AppT, self.app)
            threaded = self._etj_threaded = bool(app.conf.producer_threaded)
        return threaded

    @property
    def size(self) -> int:
        """Upstream's: messages waiting to be produced (the setting read once)."""
        if self._threaded():
            return len(self.queue._queue) if self.queue else 0  # type: ignore[attr-defined]  # Queue._queue, the deque: a CPython detail typeshed omits (upstream reads it too)
        return len(self.pending._queue)  # type: ignore[attr-defined]  # Queue._queue, the deque: a CPython detail typeshed omits (upstream reads it too)

    def put(self, fut: Any) -> None:
        """Upstream's: add a message to the buffer (the threaded producer's queue, if
        threaded); the setting read once."""
        if self._threaded():
            threaded_producer = self.threaded_producer
            queue = self.queue
            if not queue:
                # made when the threaded producer starts, before anything is produced
                queue = self.queue = cast(asyncio.Queue, threaded_producer.event_queue)
            asyncio.run_coroutine_threadsafe(queue.put(fut), threaded_producer.thread_loop)
        else:
            self.pending.put_nowait(fut)


class EtjTopic(Topic):
    """Faust's topic, failing stop when a send through it fails."""

    @replaces("faust.topics:Topic.publish_message", "5233ad2ac1e5")
    async def publish_message(self, fut: Any, wait: bool = False) -> Any:
        """A send that fails ends the worker before another offset is committed.

        Upstream: when a send fails, Faust logs it (or crashes its producer buffer) and stops
        the worker *gracefully*.

        Symptom: the graceful stop committed the offsets of records whose changelog rows or
        outputs were never written, so they were lost (seen: a car's ADD move).

        Here every send through a topic (``Topic.send``, buffered or not) that raises ends the
        process at once (:func:`app.runtime.fail_stop`, exit 75): the supervisor starts it
        again, tables recover from the changelogs, and the records after the last commit are
        read again. (The batch path's sends, :mod:`app.outputs.producer_batches`, fail stop the same way.)

        Test: tests/broker/test_delivery.py::test_a_send_that_raises_stops_the_process_before_anyone_sees_the_error

        Remove when: Faust stops without committing when a send fails.
        """
        try:
            return await Topic.publish_message(self, fut, wait=wait)
        except (ProducerSendError, KafkaError) as exc:
            fail_stop(f"sending to {self.get_topic_name()} failed: {exc!r}")
            raise


class InvalidRecordError(BrokerResponseError):
    """Broker error 87 (Kafka 2.5+), unknown to aiokafka 0.14: its ``for_code`` turns it into
    ``UnknownError``, which says nothing about whether sending again could help."""

    errno = 87
    message = "INVALID_RECORD"
    description = "This record has failed the validation on broker and hence will be rejected."


def register_broker_errors() -> None:
    """Teach aiokafka's ``for_code`` the broker errors it lacks (:class:`InvalidRecordError`)."""
    aiokafka.errors.kafka_errors.setdefault(InvalidRecordError.errno, InvalidRecordError)


# --- what the batch path and the send API read of aiokafka's producer ----------------------


def aiokafka_producer(app: Any) -> aiokafka.AIOKafkaProducer:
    """The app's started aiokafka producer (Faust's ``Producer._ensure_producer``)."""
    return app.producer._ensure_producer()


def request_limits(producer: aiokafka.AIOKafkaProducer) -> tuple[int, Any]:
    """(``max_request_size``, compression type) of an aiokafka producer: the batch path builds
    its own record batches and must apply the same limit and codec."""
    return producer._max_request_size, producer._message_accumulator._compression_type


async def topic_partitions(producer: aiokafka.AIOKafkaProducer, topic: str) -> set[int] | None:
    """The partitions of ``topic`` once its metadata is known (tracked for every refresh)."""
    client = producer.client
    await client._wait_on_metadata(topic)
    return client.cluster.partitions_for_topic(topic)


async def send_alone_batch(
    producer: aiokafka.AIOKafkaProducer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    timestamp: int | None = None,
    headers: Any = None,
) -> Any:
    """Send one record in a producer batch of its own, to the partition ``send`` would pick,
    after ``send``'s own size check (``send_batch`` skips it: raises
    ``MessageSizeTooLargeError``); the delivery future. ``timestamp`` and ``headers``: the
    record's as it was first sent (a hop's record passed on as it came, a foreign-key delete's
    ``etj-deleted-at``): sent alone it must say the same."""
    listed = list(headers) if headers else []
    producer._serialize(key, value, listed)
    await producer.client._wait_on_metadata(topic)
    partition = producer._partition(topic, None, key, value, key, value)
    batch = producer.create_batch()
    # the first record always fits
    batch.append(key=key, value=value, timestamp=timestamp, headers=listed)
    return await producer.send_batch(batch, topic, partition=partition)


def describe_producer(app: Any) -> str:
    """The producer's state for a stall's log line (:mod:`app.loop.awaiting`): the nodes with a
    request in flight (aiokafka sends one request per node at a time), the partitions muted
    meanwhile, the batches waiting and the oldest one's age. A loop that waits in aiokafka's
    ``wait_drain`` waits for these."""
    producer = getattr(app.producer, "_producer", None)
    if producer is None:
        return "producer: not started"
    sender = getattr(producer, "_sender", None)
    batches = [b for queue in producer._message_accumulator._batches.values() for b in queue]
    oldest = max((time.monotonic() - b._ctime for b in batches), default=0.0)
    task = getattr(sender, "_sender_task", None)
    return (
        f"producer: requests in flight to nodes "
        f"{sorted(getattr(sender, '_in_flight', ()))}, "
        f"{len(getattr(sender, '_muted_partitions', ()))} partitions muted, {len(batches)} "
        f"batches waiting (oldest {oldest:.1f} s), sender "
        f"{'running' if task is not None and not task.done() else 'STOPPED'}"
    )

"""Producer delivery: re-send through broker stalls, keep every topic's leaders known, stop
without committing when a send fails — unless the broker refuses an output record for good.

Every record etj produces (table changelogs, revisions, car moves, ticks, dead letters) is the
durable side of an input record that Faust will ack. Three gaps in Faust + aiokafka lose it:

* aiokafka uses ONE setting, ``request_timeout_ms`` (Faust ``producer_request_timeout``), as the
  per-request timeout *and* as the age at which a batch expires unsent. A broker that leaves a
  produce request unanswered for that long (stalled, paused, overloaded) therefore expires the
  batch at the moment the request times out, and with one-record batches the next ``send`` gives
  up waiting for it (``KafkaTimeoutError``): nothing is re-sent. Here a batch lives for
  ``ETJ_PRODUCER_DELIVERY_TIMEOUT_S`` instead (Kafka's ``delivery.timeout.ms``), so a timed-out
  request is re-sent on a new connection, and so is one refused as retriable (e.g.
  ``NotLeaderForPartition``). A re-send may write a record twice; revisions, moves and changelog
  rows are idempotent, so the answer does not change.
* aiokafka's producer tracks for metadata only the topics it did not know at their first send:
  a topic already in its (startup, all-topics) metadata is never tracked, and the first refresh
  for a newly tracked topic replaces the metadata with that topic's alone. The untracked topic's
  partitions then have no leader: its waiting batch is never sent and every refresh leaves it
  out, until the batch expires (seen in CI: a zone-pollution changelog row, NotLeaderForPartition
  after 10 s; with a longer delivery timeout the agent would just wait). Every sent-to topic is
  tracked here (:func:`_wait_on_metadata`).
* When a send does fail, Faust logs it (or crashes its producer buffer) and stops the worker
  *gracefully*: the stop commits the offsets of records whose changelog rows or outputs were never
  written, so they are lost (seen: a car's ADD move). Here any failed send ends the process at
  once with :data:`EXIT_CODE`, before another offset is committed: the supervisor (Kubernetes,
  ``make run``) starts it again, the tables are recovered from what reached the changelogs, and
  the records after the last commit are read again (fail-stop, at-least-once).
* ... except for a poison pill: an OUTPUT record (a revision, a car move, a late record) that
  the broker refuses for a reason that will not change — over the producer's
  ``max_request_size`` (``MessageSizeTooLargeError``, raised by ``send`` itself), over the
  topic's ``max.message.bytes`` (the same class, on the future), a batch over the segment size,
  a record that fails the broker's validation (``INVALID_RECORD``, a code aiokafka 0.14 does
  not know: registered here, :class:`InvalidRecordError`) or its checksum. Fail-stop would meet
  the same refusal after every restart, forever. :func:`send_direct` with ``refusable=True``
  hands such a refusal to its caller instead (:func:`refused_for_good`): the durable loop
  confirms it by sending the record alone (:func:`send_alone`: a refusal of a whole producer
  batch must not condemn the other records in it) and then dead-letters the INPUT record that
  produced it. Changelog rows are never refusable (state cannot be dropped), and neither is a
  transient error (timeout, broker unavailable, not leader, ...) nor a refusal that is the
  deployment's, not the record's (topic authorization, an invalid topic): those still fail-stop.

Upstream: aiokafka 0.14.0 (``MessageAccumulator._batch_ttl``, ``AIOKafkaClient._topics``,
``errors.kafka_errors``, ``AIOKafkaProducer._partition`` / ``_serialize``), faust-streaming
0.15.3 (``Producer._producer_type``, ``Topic.publish_message``). Tests:
tests/broker/test_delivery.py (the metadata drop, reproduced against the broker; the fail-stop
paths), tests/broker/test_faults_stalled_broker.py (a SIGSTOPped broker: re-sent and exact; past
the delivery timeout: exit 75, restart exact), tests/unit/test_refusals.py (which refusals are
for good), tests/broker/test_poison_pill.py (an output over the producer's max request size: its
input dead-lettered, the worker goes on). Remove when aiokafka has a
``delivery_timeout_ms`` and keeps every sent-to topic in its metadata, and Faust stops without
committing when a send fails; keep the refusal classification (aiokafka has no notion of a
refusal that is the record's fault) and :class:`InvalidRecordError` while aiokafka lacks it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import time
from typing import Any, Callable

import aiokafka
import aiokafka.errors
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import (BrokerResponseError, CorruptRecordException, KafkaError,
                             MessageSizeTooLargeError, RecordListTooLargeError)
from faust.exceptions import ProducerSendError
from faust.sensors import Sensor
from faust.topics import Topic
from faust.transport.drivers.aiokafka import Producer

log = logging.getLogger(__name__)

#: exit status of a worker that stopped because a record could not be delivered (EX_TEMPFAIL)
EXIT_CODE = 75

#: how the process ends; a parameter so that unit tests can watch it instead of exiting
_exit: Callable[[int], Any] = os._exit


def fail_stop(reason: str) -> None:
    """End the worker now, committing nothing more: records since the last commit are re-read."""
    log.critical("fail-stop: %s; exiting (%d) without committing offsets, the records after the "
                 "last commit are read again on restart", reason, EXIT_CODE)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    _exit(EXIT_CODE)


def with_delivery_timeout(producer: aiokafka.AIOKafkaProducer, delivery_timeout_s: float,
                          ) -> aiokafka.AIOKafkaProducer:
    """Let ``producer``'s batches outlive a request timeout, up to ``delivery_timeout_s`` (never
    less than the request timeout): expiry and the wait to append both use it."""
    accumulator = producer._message_accumulator
    ttl = max(delivery_timeout_s, producer._request_timeout_ms / 1000)
    accumulator._batch_ttl = ttl
    add_message = accumulator.add_message

    async def add_message_within_ttl(tp: Any, key: Any, value: Any, timeout: float,
                                     **kwargs: Any) -> Any:
        return await add_message(tp, key, value, ttl, **kwargs)

    accumulator.add_message = add_message_within_ttl
    return producer


class FailStopOnSendError(Sensor):
    """A send that failed after the producer gave up (its future, not ``send`` itself)."""

    def on_send_error(self, producer: Any, exc: BaseException, state: Any) -> None:
        fail_stop(f"a produced record was not delivered: {exc!r}")


def _producer_type(self: Producer) -> Callable[..., aiokafka.AIOKafkaProducer]:
    """Faust's ``Producer._producer_type``, with this app's delivery timeout (if it has one)."""
    delivery_timeout_s = getattr(getattr(self.app, "etj", None), "producer_delivery_timeout_s",
                                 None)
    if delivery_timeout_s is None:
        return aiokafka.AIOKafkaProducer
    return lambda **kw: with_delivery_timeout(aiokafka.AIOKafkaProducer(**kw), delivery_timeout_s)


class InvalidRecordError(BrokerResponseError):
    """Broker error 87 (Kafka 2.5+), unknown to aiokafka 0.14: its ``for_code`` turns it into
    ``UnknownError``, which says nothing about whether sending again could help."""

    errno = 87
    message = "INVALID_RECORD"
    description = "This record has failed the validation on broker and hence will be rejected."


#: refusals of the record itself (its size, its bytes): sent again, it is refused again.
#: Not here on purpose: authorization and topic errors (the deployment's, fixed by an operator:
#: fail-stop waits for that; dead-lettering every record meanwhile would not), timestamps (the
#: producer stamps records with the clock) and every ``retriable`` error
REFUSED_FOR_GOOD: tuple[type[BaseException], ...] = (
    MessageSizeTooLargeError,  # over max_request_size (send), or max.message.bytes (broker)
    RecordListTooLargeError,  # a batch over the broker's segment size
    CorruptRecordException,  # failed the checksum, or a size the broker cannot read
    InvalidRecordError,  # failed the broker's validation (e.g. no key on a compacted topic)
)


def refused_for_good(exc: BaseException) -> bool:
    """Did the producer or the broker refuse the record itself, so that no retry or restart can
    deliver it? (Faust wraps what ``send`` raises in ``ProducerSendError``: its cause says.)"""
    if isinstance(exc, ProducerSendError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return isinstance(exc, REFUSED_FOR_GOOD) and not getattr(exc, "retriable", False)


async def send_direct(app: Any, topic: str, key: bytes | None, value: bytes | None,
                      partition: int | None = None, *, refusable: bool = False) -> Any:
    """Hand serialized bytes straight to Faust's producer (aiokafka); the delivery future.

    The hot path's sends (a batch's changelog rows and outputs, :mod:`app.agents.durable`)
    skip Faust's ``Topic.send`` -> ``FutureMessage`` -> ``publish_message`` layers, which cost
    more than the aiokafka send itself; partitioning (``partition=None``: aiokafka's, as Faust
    leaves it) and the fail-stop are the same: a send refused now, or a future that fails later,
    ends the worker like any other lost send (module docstring).

    ``refusable`` (outputs only, never a changelog row): a refusal :func:`refused_for_good`
    does not end the worker; the future fails with it (at once when ``send`` itself refused),
    and the caller MUST await it and deal with the record (the durable loop dead-letters its
    input). Every other error still fails stop."""
    try:
        fut = await app.producer.send(topic, key, value, partition, None, None)
    except (ProducerSendError, KafkaError) as exc:
        if refusable and refused_for_good(exc):
            return _failed(exc.__cause__ if isinstance(exc, ProducerSendError) else exc)
        fail_stop(f"sending to {topic} failed: {exc!r}{_row_hint(topic, exc)}")
        raise
    fut.add_done_callback(_fail_stop_unless_refused if refusable
                          else functools.partial(_fail_stop_on_error, topic))
    return fut


def _row_hint(topic: str, exc: BaseException) -> str:
    """What to do when the refused record is a table row (the worker fails stop on it after
    every restart until someone acts): empty for any other refusal."""
    if not (topic.endswith("-changelog") and refused_for_good(exc)):
        return ""
    return ("; a table row outgrew what the producer or the topic accepts: raise "
            "ETJ_PRODUCER_MAX_REQUEST_BYTES and the changelog topic's max.message.bytes, or, "
            "for a join whose keys have many events in retention, give it the per-join layout "
            "(docs/operating/recovery.md)")


async def send_alone(app: Any, topic: str, key: bytes | None, value: bytes | None) -> Any:
    """Send one record in a producer batch of its own, to the partition ``send_direct`` would
    pick; the delivery future, which fails only with a refusal :func:`refused_for_good` (any
    other error fails stop).

    The broker answers per batch: a refusal on a future may be a neighbour's in the same batch
    (a batch over ``max.message.bytes``, an invalid record in it). Sent alone, a record refused
    again is refused for itself. (aiokafka: ``create_batch``/``send_batch``, and its private
    ``_partition``, as ``send`` uses it.)"""
    producer = app.producer._ensure_producer()
    try:
        producer._serialize(key, value, [])  # send's own check of max_request_size
    except MessageSizeTooLargeError as exc:  # (send_batch skips it)
        return _failed(exc)
    try:
        await producer.client._wait_on_metadata(topic)
        partition = producer._partition(topic, None, key, value, key, value)
        batch = producer.create_batch()
        batch.append(key=key, value=value, timestamp=None)  # the first record always fits
        fut = await producer.send_batch(batch, topic, partition=partition)
    except KafkaError as exc:
        fail_stop(f"sending to {topic} failed: {exc!r}")
        raise
    fut.add_done_callback(_fail_stop_unless_refused)
    return fut


def _failed(exc: BaseException) -> Any:
    """A delivery future that failed already, with ``exc``."""
    fut = asyncio.get_running_loop().create_future()
    fut.set_exception(exc)
    return fut


def _fail_stop_on_error(topic: str, fut: Any) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        exc = fut.exception()
        fail_stop(f"a produced record was not delivered to {topic}: {exc!r}"
                  f"{_row_hint(topic, exc)}")


def _fail_stop_unless_refused(fut: Any) -> None:
    if not fut.cancelled() and fut.exception() is not None \
            and not refused_for_good(fut.exception()):
        fail_stop(f"a produced record was not delivered: {fut.exception()!r}")


_publish_message = Topic.publish_message


async def _publish_or_stop(self: Topic, fut: Any, wait: bool = False) -> Any:
    """Faust's ``Topic.publish_message`` (every send, buffered or not), failing stop."""
    try:
        return await _publish_message(self, fut, wait=wait)
    except (ProducerSendError, KafkaError) as exc:
        fail_stop(f"sending to {self.get_topic_name()} failed: {exc!r}")
        raise


_original_wait_on_metadata = AIOKafkaClient._wait_on_metadata


async def _wait_on_metadata(self: AIOKafkaClient, topic: str) -> Any:
    """aiokafka's, but the topic is tracked even when its partitions are already known, so a
    refresh of the tracked topics never drops a topic a batch waits for."""
    self._topics.add(topic)
    return await _original_wait_on_metadata(self, topic)


def register_broker_errors() -> None:
    """Teach aiokafka's ``for_code`` the broker errors it lacks (:class:`InvalidRecordError`)."""
    aiokafka.errors.kafka_errors.setdefault(InvalidRecordError.errno, InvalidRecordError)


def describe_producer(app: Any) -> str:
    """The producer's state for a stall's log line (:mod:`app.awaiting`): the nodes with a
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
    return (f"producer: requests in flight to nodes "
            f"{sorted(getattr(sender, '_in_flight', ()))}, "
            f"{len(getattr(sender, '_muted_partitions', ()))} partitions muted, {len(batches)} "
            f"batches waiting (oldest {oldest:.1f} s), sender "
            f"{'running' if task is not None and not task.done() else 'STOPPED'}")


def install(app: Any) -> None:
    """Wire the fixes into ``app`` (its ``etj`` settings give the delivery timeout)."""
    register_broker_errors()
    AIOKafkaClient._wait_on_metadata = _wait_on_metadata  # type: ignore[method-assign]
    Producer._producer_type = property(_producer_type)  # type: ignore[assignment]
    Topic.publish_message = _publish_or_stop  # type: ignore[method-assign]
    app.sensors.add(FailStopOnSendError())

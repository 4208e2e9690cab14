"""Producer delivery: re-send through broker stalls, keep every topic's leaders known, stop
without committing when a send fails.

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

Upstream: aiokafka 0.14.0 (``MessageAccumulator._batch_ttl``, ``AIOKafkaClient._topics``),
faust-streaming 0.15.3 (``Producer._producer_type``, ``Topic.publish_message``). Tests:
tests/broker/test_delivery.py (the metadata drop, reproduced against the broker; the fail-stop
paths), tests/broker/test_faults_stalled_broker.py (a SIGSTOPped broker: re-sent and exact; past
the delivery timeout: exit 75, restart exact). Remove when aiokafka has a
``delivery_timeout_ms`` and keeps every sent-to topic in its metadata, and Faust stops without
committing when a send fails.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable

import aiokafka
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
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


async def send_direct(app: Any, topic: str, key: bytes | None, value: bytes | None,
                      partition: int | None = None) -> Any:
    """Hand serialized bytes straight to Faust's producer (aiokafka); the delivery future.

    The hot path's sends (a batch's changelog rows and outputs, :mod:`app.agents.durable`)
    skip Faust's ``Topic.send`` -> ``FutureMessage`` -> ``publish_message`` layers, which cost
    more than the aiokafka send itself; partitioning (``partition=None``: aiokafka's, as Faust
    leaves it) and the fail-stop are the same: a send refused now, or a future that fails later,
    ends the worker like any other lost send (module docstring)."""
    try:
        fut = await app.producer.send(topic, key, value, partition, None, None)
    except (ProducerSendError, KafkaError) as exc:
        fail_stop(f"sending to {topic} failed: {exc!r}")
        raise
    fut.add_done_callback(_fail_stop_on_error)
    return fut


def _fail_stop_on_error(fut: Any) -> None:
    if not fut.cancelled() and fut.exception() is not None:
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


def install(app: Any) -> None:
    """Wire the fixes into ``app`` (its ``etj`` settings give the delivery timeout)."""
    AIOKafkaClient._wait_on_metadata = _wait_on_metadata  # type: ignore[method-assign]
    Producer._producer_type = property(_producer_type)  # type: ignore[assignment]
    Topic.publish_message = _publish_or_stop  # type: ignore[method-assign]
    app.sensors.add(FailStopOnSendError())

"""What a failed send does: the worker fails stop, unless the broker refused an output record for
good — then the durable loop dead-letters its input. The send API of the hot path.

Every record etj produces (table changelogs, revisions, car moves, ticks, dead letters) is the
durable side of an input record that Faust will ack. When a send fails after the producer gave
up (:mod:`app.compat.producer` makes it re-send through broker stalls, up to
``ETJ_PRODUCER_DELIVERY_TIMEOUT_S``), the process ends at once with :data:`EXIT_CODE`, before
another offset is committed: the supervisor (Kubernetes, ``make run``) starts it again, the
tables are recovered from what reached the changelogs, and the records after the last commit
are read again (fail-stop, at-least-once). Faust's own reaction — a graceful stop — commits the
offsets of records whose outputs were never written.

Except for a poison pill: an OUTPUT record (a revision, a car move, a late record) that the
broker refuses for a reason that will not change — over the producer's ``max_request_size``
(``MessageSizeTooLargeError``, raised by ``send`` itself), over the topic's
``max.message.bytes`` (the same class, on the future), a batch over the segment size, a record
that fails the broker's validation (``INVALID_RECORD``:
:class:`app.compat.producer.InvalidRecordError`) or its checksum. Fail-stop would meet the same refusal after every restart, forever.
:func:`send_direct` with ``refusable=True`` hands such a refusal to its caller instead
(:func:`refused_for_good`): the durable loop confirms it by sending the record alone
(:func:`send_alone`: a refusal of a whole producer batch must not condemn the other records in
it) and then dead-letters the INPUT record that produced it. Changelog rows are never refusable
(state cannot be dropped), and neither is a transient error nor a refusal that is the
deployment's, not the record's (topic authorization, an invalid topic): those still fail stop.

Tests: tests/unit/test_refusals.py (which refusals are for good, the send API's paths),
tests/broker/test_delivery.py (fail-stop), tests/broker/test_poison_pill.py (an output over the
producer's max request size: its input dead-lettered, the worker goes on).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from aiokafka.errors import (
    CorruptRecordException,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
)
from faust.exceptions import ProducerSendError
from faust.sensors import Sensor

from app.compat.producer import InvalidRecordError, aiokafka_producer, send_alone_batch
from app.runtime import EXIT_CODE, fail_stop

__all__ = [
    "EXIT_CODE",
    "FailStopOnSendError",
    "REFUSED_FOR_GOOD",
    "fail_stop",
    "install",
    "refused_for_good",
    "row_hint",
    "send_alone",
    "send_direct",
    "watch",
]

log = logging.getLogger(__name__)


class FailStopOnSendError(Sensor):
    """A send that failed after the producer gave up (its future, not ``send`` itself)."""

    def on_send_error(self, producer: Any, exc: BaseException, state: Any) -> None:
        fail_stop(f"a produced record was not delivered: {exc!r}")


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


async def send_direct(
    app: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    partition: int | None = None,
    *,
    refusable: bool = False,
) -> Any:
    """Hand serialized bytes straight to Faust's producer (aiokafka); the delivery future.

    The hot path's sends (a batch's changelog rows and outputs, :mod:`app.loop.durable`)
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
            cause = exc.__cause__ if isinstance(exc, ProducerSendError) else exc
            assert cause is not None  # refused_for_good read a ProducerSendError's cause
            return _failed(cause)
        fail_stop(f"sending to {topic} failed: {exc!r}{row_hint(topic, exc)}")
        raise
    watch(fut, topic, refusable=refusable)
    return fut


def watch(fut: Any, topic: str, *, refusable: bool = False) -> None:
    """Fail stop when the delivery future ``fut`` of a send to ``topic`` fails, unless
    ``refusable`` and the broker refused the record for good (:func:`refused_for_good`: the
    caller awaits ``fut`` and deals with the record). Every send of the hot path is watched so,
    one record at a time (:func:`send_direct`, :func:`send_alone`) or a batch builder at a time
    (:mod:`app.outputs.producer_batches`)."""
    fut.add_done_callback(
        _fail_stop_unless_refused if refusable else functools.partial(_fail_stop_on_error, topic)
    )


def row_hint(topic: str, exc: BaseException) -> str:
    """What to do when the refused record is a table row (the worker fails stop on it after
    every restart until someone acts): empty for any other refusal."""
    if not (topic.endswith("-changelog") and refused_for_good(exc)):
        return ""
    return (
        "; a table row outgrew what the producer or the topic accepts: raise "
        "ETJ_PRODUCER_MAX_REQUEST_BYTES and the changelog topic's max.message.bytes (a "
        "join keeps a row per join and per dimension version, so such a row holds one "
        "record's fields: docs/operating/recovery.md#state-layout-changes)"
    )


async def send_alone(
    app: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    timestamp: int | None = None,
    headers: Any = None,
) -> Any:
    """Send one record in a producer batch of its own, to the partition ``send_direct`` would
    pick, with its ``timestamp`` and ``headers`` (None: the producer's clock, none); the delivery
    future, which fails only with a refusal :func:`refused_for_good` (any other error fails
    stop).

    The broker answers per batch: a refusal on a future may be a neighbour's in the same batch
    (a batch over ``max.message.bytes``, an invalid record in it). Sent alone, a record refused
    again is refused for itself (:func:`app.compat.producer.send_alone_batch`)."""
    try:
        fut = await send_alone_batch(aiokafka_producer(app), topic, key, value, timestamp, headers)
    except MessageSizeTooLargeError as exc:  # send's own check of max_request_size
        return _failed(exc)
    except KafkaError as exc:
        fail_stop(f"sending to {topic} failed: {exc!r}")
        raise
    watch(fut, topic, refusable=True)
    return fut


def _failed(exc: BaseException) -> Any:
    """A delivery future that failed already, with ``exc``."""
    fut = asyncio.get_running_loop().create_future()
    fut.set_exception(exc)
    return fut


def _fail_stop_on_error(topic: str, fut: Any) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        exc = fut.exception()
        fail_stop(f"a produced record was not delivered to {topic}: {exc!r}{row_hint(topic, exc)}")


def _fail_stop_unless_refused(fut: Any) -> None:
    if (
        not fut.cancelled()
        and fut.exception() is not None
        and not refused_for_good(fut.exception())
    ):
        fail_stop(f"a produced record was not delivered: {fut.exception()!r}")


def install(app: Any) -> None:
    """Fail stop on a send that failed after the producer gave up (a Faust sensor)."""
    app.sensors.add(FailStopOnSendError())

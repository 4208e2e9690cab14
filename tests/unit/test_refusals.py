"""Which send failures are the record's own, for good (dead-letter its input), and which still
fail-stop (app.outputs.delivery.refused_for_good, send_direct(refusable=True), send_alone)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as E
from faust.exceptions import ProducerSendError

from app.compat import producer as etj_producer
from app.outputs import delivery
from tests.harness import Stopped

etj_producer.register_broker_errors()


def wrapped(exc: BaseException) -> ProducerSendError:
    """What Faust's Producer.send raises for an aiokafka error."""
    try:
        raise ProducerSendError(f"Error while sending: {exc!r}") from exc
    except ProducerSendError as outer:
        return outer


CLIENT_SIDE_TOO_LARGE = E.MessageSizeTooLargeError(
    "The message is 2000088 bytes when serialized which is larger than the maximum request "
    "size you have configured with the max_request_size configuration"
)


@pytest.mark.parametrize(
    "exc",
    [
        CLIENT_SIDE_TOO_LARGE,  # raised by send(): over the producer's max_request_size
        wrapped(CLIENT_SIDE_TOO_LARGE),  # ... as Faust's producer raises it
        E.for_code(10)(),  # MESSAGE_TOO_LARGE from the broker: over the topic's max.message.bytes
        E.for_code(18)(),  # RECORD_LIST_TOO_LARGE
        E.for_code(2)(),  # CORRUPT_MESSAGE
        E.for_code(87)(),  # INVALID_RECORD (unknown to aiokafka 0.14: registered by delivery)
    ],
    ids=repr,
)
def test_refusals_of_the_record_itself_are_for_good(exc):
    assert delivery.refused_for_good(exc)


@pytest.mark.parametrize(
    "exc",
    [
        E.KafkaTimeoutError(),  # batch expired: broker stalled past the delivery timeout
        E.RequestTimedOutError(),
        E.NotLeaderForPartitionError(),
        E.LeaderNotAvailableError(),
        E.KafkaConnectionError(),
        E.NodeNotReadyError(),
        E.UnknownTopicOrPartitionError(),
        E.NotEnoughReplicasError(),
        E.TopicAuthorizationFailedError("t"),  # the deployment's: fixed by an operator
        E.InvalidTopicError(),
        E.InvalidTimestampError(),
        E.UnknownError(),
        E.KafkaError(),
        ProducerSendError("no cause"),
        wrapped(E.KafkaTimeoutError()),
        RuntimeError("bug"),
    ],
    ids=repr,
)
def test_transient_and_deployment_failures_are_not(exc):
    assert not delivery.refused_for_good(exc)


def test_a_retriable_refusal_is_never_for_good():
    class Retriable(E.MessageSizeTooLargeError):
        retriable = True

    assert not delivery.refused_for_good(Retriable())


def test_invalid_record_is_known_to_aiokafka_once_installed():
    assert E.for_code(87) is etj_producer.InvalidRecordError


# --- send_direct / send_alone with a fake producer -----------------------------------------


class FakeProducer:
    """Faust's producer: ``send`` raises ``raises`` or returns a future the test settles."""

    def __init__(self, raises: BaseException | None = None) -> None:
        self.raises = raises
        self.futures: list[asyncio.Future] = []

    async def send(self, topic, key, value, partition, timestamp, headers) -> Any:
        if self.raises is not None:
            raise self.raises
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


class FakeApp:
    def __init__(self, producer: FakeProducer) -> None:
        self.producer = producer


async def test_refused_by_send_itself_gives_a_failed_future_when_refusable(exits):
    app = FakeApp(FakeProducer(raises=wrapped(CLIENT_SIDE_TOO_LARGE)))
    fut = await delivery.send_direct(app, "out", b"k", b"v", refusable=True)
    with pytest.raises(E.MessageSizeTooLargeError):
        await fut
    assert exits == []


async def test_refused_by_send_itself_fails_stop_when_not_refusable(exits, caplog):
    app = FakeApp(FakeProducer(raises=wrapped(CLIENT_SIDE_TOO_LARGE)))
    with pytest.raises(Stopped):  # a changelog row: state cannot be dropped
        await delivery.send_direct(app, "x-changelog", b"k", b"v", 0)
    assert exits == [delivery.EXIT_CODE]
    # it stops again after every restart: the log says what to change
    assert (
        "ETJ_PRODUCER_MAX_REQUEST_BYTES" in caplog.text and "per dimension version" in caplog.text
    )


async def test_a_row_refused_later_by_the_broker_says_what_to_change(exits, caplog):
    producer = FakeProducer()
    fut = await delivery.send_direct(FakeApp(producer), "x-changelog", b"k", b"v", 0)
    fut.set_exception(E.for_code(10)())  # MESSAGE_TOO_LARGE: over max.message.bytes
    await asyncio.sleep(0)
    assert exits == [delivery.EXIT_CODE]
    assert "x-changelog" in caplog.text and "max.message.bytes" in caplog.text


async def test_a_transient_send_error_fails_stop_even_when_refusable(exits):
    app = FakeApp(FakeProducer(raises=wrapped(E.KafkaTimeoutError())))
    with pytest.raises(Stopped):
        await delivery.send_direct(app, "out", b"k", b"v", refusable=True)
    assert exits == [delivery.EXIT_CODE]


@pytest.mark.parametrize(
    "refusable,error,stops",
    [
        (True, E.MessageSizeTooLargeError(), False),  # the caller dead-letters its input
        (False, E.MessageSizeTooLargeError(), True),  # a changelog row
        (True, E.KafkaTimeoutError(), True),
        (True, E.TopicAuthorizationFailedError("out"), True),
    ],
)
async def test_a_future_that_fails_later(exits, refusable, error, stops):
    producer = FakeProducer()
    fut = await delivery.send_direct(FakeApp(producer), "out", b"k", b"v", refusable=refusable)
    fut.set_exception(error)
    await asyncio.sleep(0)  # the done callbacks run
    assert exits == ([delivery.EXIT_CODE] if stops else [])


async def test_send_alone_applies_the_producers_size_check(exits):
    """``send_batch`` skips the max_request_size check ``send`` makes: send_alone makes it."""
    import aiokafka

    producer = aiokafka.AIOKafkaProducer(max_request_size=1000)  # not started: never sends

    class App:
        class producer:
            @staticmethod
            def _ensure_producer() -> Any:
                return producer

    try:
        fut = await delivery.send_alone(App, "out", b"k", b"x" * 2000)
        with pytest.raises(E.MessageSizeTooLargeError):
            await fut
        assert exits == []
    finally:
        await producer.stop()

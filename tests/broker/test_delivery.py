"""Unit tests of app.compat.producer and app.outputs.delivery: batches outlive a request timeout; a failed send stops the worker
without a graceful (committing) stop. The broker side: tests/broker/test_faults_stalled_broker.py."""

from __future__ import annotations

import aiokafka
import pytest
from aiokafka.errors import KafkaTimeoutError, NotLeaderForPartitionError
from aiokafka.structs import TopicPartition
from faust.exceptions import ProducerSendError
from faust.topics import Topic

from app.compat import producer as etj_producer
from app.compat.producer import EtjProducer, EtjTopic
from app.outputs import delivery
from tests.harness import Stopped

TP = TopicPartition("t", 0)


async def test_a_batch_lives_for_the_delivery_timeout_not_the_request_timeout():
    plain = aiokafka.AIOKafkaProducer(request_timeout_ms=2000)
    patched = etj_producer.with_delivery_timeout(
        aiokafka.AIOKafkaProducer(request_timeout_ms=2000), 60
    )
    for producer in (plain, patched):
        await producer._message_accumulator.add_message(TP, b"k", b"v", timeout=2)
    [old], [young] = (list(p._message_accumulator._batches[TP]) for p in (plain, patched))
    for batch in (old, young):
        batch._ctime -= 5  # 5 s unsent: past the request timeout, within the delivery timeout
    assert old.expired() and not young.expired()
    young._ctime -= 60
    assert young.expired()


async def test_the_delivery_timeout_is_never_shorter_than_the_request_timeout():
    producer = etj_producer.with_delivery_timeout(
        aiokafka.AIOKafkaProducer(request_timeout_ms=30000), 5
    )
    assert producer._message_accumulator._batch_ttl == 30


async def test_a_send_waits_for_room_up_to_the_delivery_timeout(monkeypatch):
    producer = aiokafka.AIOKafkaProducer(request_timeout_ms=2000)
    waited: list[float] = []

    async def add_message(tp, key, value, timeout, **kwargs):
        waited.append(timeout)
        raise KafkaTimeoutError()

    monkeypatch.setattr(producer._message_accumulator, "add_message", add_message)
    etj_producer.with_delivery_timeout(producer, 45)
    with pytest.raises(KafkaTimeoutError):
        await producer._message_accumulator.add_message(TP, b"k", b"v", 2.0)
    assert waited == [45]


def test_a_send_that_failed_later_stops_the_process(exits):
    with pytest.raises(Stopped):
        delivery.FailStopOnSendError().on_send_error(None, NotLeaderForPartitionError(), None)
    assert exits == [delivery.EXIT_CODE]


class FakeTopic:
    def get_topic_name(self) -> str:
        return "etj-car-moves"


async def test_a_send_that_raises_stops_the_process_before_anyone_sees_the_error(
    exits, monkeypatch
):
    async def publish(self, fut, wait=False):
        raise ProducerSendError("Error while sending: KafkaTimeoutError()")

    monkeypatch.setattr(Topic, "publish_message", publish)
    with pytest.raises(Stopped):
        await EtjTopic.publish_message(FakeTopic(), object())
    assert exits == [delivery.EXIT_CODE]


async def test_a_send_that_works_does_not_stop(exits, monkeypatch):
    async def publish(self, fut, wait=False):
        return "metadata"

    monkeypatch.setattr(Topic, "publish_message", publish)
    assert await EtjTopic.publish_message(FakeTopic(), object(), wait=True) == "metadata"
    assert exits == []


def test_the_worker_app_has_both_halves_installed():
    from app.main import app

    assert isinstance(app.topic("etj-any"), EtjTopic)
    assert isinstance(app.producer, EtjProducer)
    assert any(isinstance(s, delivery.FailStopOnSendError) for s in app.sensors)
    make = app.producer._producer_type
    assert make is not aiokafka.AIOKafkaProducer  # wraps it with this app's delivery timeout
    assert app.etj.producer_delivery_timeout_s == 120.0


async def test_a_topic_known_before_its_first_send_keeps_its_leaders(broker, names, monkeypatch):
    """Against the broker: aiokafka's producer starts with every topic's metadata; sending to a
    new topic afterwards must not drop the leaders of one it already sends to (without the fix,
    ``partitions_for_topic(known)`` is None here: a batch for it would wait for a leader)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    known, new = f"{names.prefix}-known", f"{names.prefix}-new"
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(known, 4, 1)])
        producer = etj_producer.track_every_topic(
            aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        )
        await producer.start()  # metadata of all topics, none tracked
        try:
            await producer.send_and_wait(known, b"v", partition=3)
            await admin.create_topics([NewTopic(new, 4, 1)])
            await producer.send_and_wait(new, b"v", partition=0)  # tracks `new`, refreshes
            await producer.client.force_metadata_update()
            assert producer.client.cluster.partitions_for_topic(known) == {0, 1, 2, 3}
            assert producer.client.cluster.leader_for_partition(TopicPartition(known, 3)) not in (
                None,
                -1,
            )
        finally:
            await producer.stop()
    finally:
        await admin.close()


async def test_a_record_sent_alone_keeps_its_timestamp_and_headers(broker, names):
    """A refused batch's records are each sent alone again (app.loop.dead_letters): a record
    passed on as it came (a hop) or a foreign-key delete (``etj-deleted-at``, which consumers
    order deletes by) must reach the broker as it was first sent, not with the producer's clock
    and no headers."""
    from tests.broker.test_repartition_broker import read_raw

    topic = f"{names.prefix}-alone"
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        fut = await etj_producer.send_alone_batch(
            producer, topic, b"k", None, 1_234_567, [("etj-deleted-at", b"42")]
        )
        await fut
        plain = await etj_producer.send_alone_batch(producer, topic, b"k", b"v")
        await plain
    finally:
        await producer.stop()
    got = await read_raw(names, topic)
    first, second = sorted(got, key=lambda m: m.offset)
    assert (first.key, first.value, first.timestamp) == (b"k", None, 1_234_567)
    assert list(first.headers) == [("etj-deleted-at", b"42")]
    assert second.value == b"v" and second.timestamp > 1_234_567 and not second.headers

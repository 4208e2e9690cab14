"""app.compat.consumer_thread (end offsets by Fetch): with producer batching on the bundled broker, recovery is exact.

tansu's ListOffsets answers the first offset of a partition's newest batch + 1; a Fetch reports
the true high watermark. With ``ETJ_END_OFFSETS_BY_FETCH`` Faust's end offsets are the larger of
the two, so a worker can use the producer's batching and a fresh worker still recovers every
changelog row. On another broker (``ETJ_BOOTSTRAP``) both answers agree and only the recovery
test says something.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from app.commands.sample_traffic import sample_moods_and_events
from app.compat.consumer_thread import fetched_ends
from tests.faults import mood_history, processed, send, settle_and_check, wait_processed
from tests.harness import bootstrap, create_topic, make_names

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(12))


async def ends(names, tps: list[TopicPartition]) -> tuple[dict, dict]:
    """(ListOffsets' end offsets, the same raised by a Fetch's high watermarks)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(names), **names.client_auth(), enable_auto_commit=False
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        listed = await consumer.end_offsets(tps)
        return listed, await fetched_ends(consumer._client, listed)
    finally:
        await consumer.stop()


async def test_a_fetch_tells_the_end_of_a_batched_partition(broker, names) -> None:
    topic = f"{names.prefix}-batched"
    await create_topic(names, topic, 2)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap(names), **names.client_auth(), linger_ms=100
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"alone", partition=0)
        sent = await asyncio.gather(
            *[await producer.send(topic, b"%d" % i, partition=0) for i in range(10)]
        )
    finally:
        await producer.stop()
    assert [m.offset for m in sent] == list(range(1, 11))
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    listed, fetched = await ends(names, [tp0, tp1])
    assert fetched == {tp0: 11, tp1: 0}
    if not broker.external:  # the quirk this patch is for; the day it fails, remove the patch
        assert listed[tp0] == 2, (
            f"tansu's ListOffsets now says {listed[tp0]}: see app/compat/consumer_thread.py"
        )


async def test_a_fresh_worker_recovers_every_row_a_batching_worker_wrote(
    broker, worker_factory
) -> None:
    names = make_names(broker.url, end_offsets_by_fetch="true", producer_linger_ms=50)
    del names.env["ETJ_PRODUCER_MAX_BATCH_SIZE"]  # the producer's default batching
    records = sample_moods_and_events(
        seed=31, count=600, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    first = worker_factory(names, name="batching").wait_ready()
    sent = await send(names, records)
    await asyncio.to_thread(wait_processed, first, len(records))
    before = await asyncio.to_thread(mood_history, [first], CONSULTANTS)
    assert first.stop() == 0

    # the changelogs really hold multi-record batches: ListOffsets alone would stop short
    changelogs = await changelog_partitions(names)
    listed, fetched = await ends(names, changelogs)
    assert fetched != listed or broker.external, "no batched changelog: the test tests nothing"

    second = worker_factory(names, name="fresh").wait_ready()  # its own, empty data dir
    assert await asyncio.to_thread(mood_history, [second], CONSULTANTS) == before
    await settle_and_check(names, records, sent, [second])
    assert processed(second) == 0, "everything was committed: only the tables were recovered"


async def changelog_partitions(names) -> list[TopicPartition]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await consumer.start()
    try:
        topics = [
            t
            for t in await consumer.topics()
            if t.startswith(names.app_id) and t.endswith("-changelog")
        ]
        return [
            TopicPartition(t, p)
            for t in topics
            for p in sorted(consumer.partitions_for_topic(t) or ())
        ]
    finally:
        await consumer.stop()

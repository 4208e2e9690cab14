"""Refuse to start when joined input topics are not co-partitioned; name a producer whose
partitioner is not Kafka's default.

Faust's assignor silently groups topics by partition count: two joined topics with different
counts land on different workers and the join quietly misses records. So the worker checks the
broker's metadata before it starts consuming and stops with a message that names the topics.

Equal counts are not enough: both sides must put a key in the same partition. A sample of each
input partition is checked at start (:func:`warn_of_partitioners`) so that a producer with
another partitioner is named in the log before the first record reaches a join; every record
is checked again at the door (:mod:`app.inputs.admission`, by :func:`check_partition`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from app.kafka.connection import bootstrap_servers
from app.kafka.partitioner import partition_for

log = logging.getLogger(__name__)


class CopartitionError(RuntimeError):
    """Joined topics exist with partition counts that cannot be joined."""


#: a co-partition group: its name (a join, or the car join's side), its topics, and the
#: partition count they must have (the one its internal topics and changelogs are created with)
Group = tuple[str, tuple[str, ...], int]


def check_groups(counts: Mapping[str, int], groups: Iterable[Group]) -> None:
    """Pure check: ``counts`` are the partition counts of the topics that exist.

    Each group's topics must agree with the group's count: the worker creates the group's
    internal topics (its ticks) and its tables' changelogs with that count, and each group has
    its own (``partitions`` of a join spec; ``ETJ_PARTITIONS`` for the built-in joins and specs
    that give none), so a join of your 12-partition topics and the 4-partition etj-* topics run
    side by side."""
    problems = []
    for name, topics, expected in groups:
        present = {t: counts[t] for t in topics if t in counts}
        if any(n != expected for n in present.values()):
            listed = ", ".join(f"{t} has {n}" for t, n in present.items())
            agreed = set(present.values())
            hint = (
                f" (they agree on {next(iter(agreed))}: give the join that count)"
                if len(agreed) == 1 and len(present) > 1
                else ""
            )
            problems.append(
                f"{name}: co-partitioned topics {', '.join(topics)} must have "
                f"{expected} partitions: {listed}{hint}"
            )
    if problems:
        raise CopartitionError(
            "etj refuses to start: "
            + "; ".join(problems)
            + ". Topics that are joined must share their key and partition count: recreate the "
            "odd topic with the group's count, or give the join that count (a spec's "
            '"partitions"; ETJ_PARTITIONS for the built-in joins and specs without one).'
        )


async def fetch_partition_counts(
    broker_url: str, topics: Iterable[str], auth: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """Partition count of each of ``topics`` that exists (metadata only, creates nothing).

    ``auth``: TLS/SASL keyword arguments of the client (:func:`app.kafka.security.aiokafka_auth`).
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers(broker_url), enable_auto_commit=False, **(auth or {})
    )
    await consumer.start()
    try:
        existing = await consumer.topics()
        counts = {}
        for topic in topics:
            if topic in existing:
                parts = consumer.partitions_for_topic(topic)
                if parts:
                    counts[topic] = len(parts)
        return counts
    finally:
        await consumer.stop()


async def check_copartitioning(
    broker_url: str, groups: list[Group], auth: Mapping[str, Any] | None = None
) -> None:
    """Raise :class:`CopartitionError` if any group of joined topics disagrees."""
    counts = await fetch_partition_counts(broker_url, {t for _, g, _ in groups for t in g}, auth)
    check_groups(counts, groups)


# --- the partitioner: each record at the door, a sample at start ---------------------------------


def wrong_partition_reason(key: bytes, partition: int, expected: int, partitions: int) -> str:
    """What a dead letter, or the start-up sample's log line, says of a key in the wrong
    partition."""
    return (
        f"key {key[:60]!r} is in partition {partition}, but Kafka's default partitioner "
        f"(murmur2) puts it in partition {expected} of {partitions}: the producer uses "
        "another partitioner (librdkafka's default, consistent_random, hashes with CRC32), "
        "so this key's records may be split across partitions and joined wrong; set "
        "partitioner=murmur2_random on that producer (confluent-kafka, Go, .NET), or "
        "ETJ_CHECK_PARTITIONER=false if every input of the join is partitioned the same "
        "other way"
    )


def check_partition(key: bytes | None, partition: int, partitions: int | None) -> str | None:
    """Why a record is in the wrong partition for its key (None: it is not, or no key or
    partition count to tell by)."""
    if key is None or not partitions:
        return None
    expected = partition_for(key, partitions)
    if expected == partition:
        return None
    return wrong_partition_reason(key, partition, expected, partitions)


#: records read from the end of each input partition at start
SAMPLE_PER_PARTITION = 20


async def sample_partitioner(
    broker_url: str,
    topics: Iterable[str],
    auth: Mapping[str, Any] | None = None,
    per_partition: int = SAMPLE_PER_PARTITION,
    timeout_s: float = 10.0,
) -> dict[str, tuple[int, int, str]]:
    """Read the last ``per_partition`` records of each partition of ``topics`` and check each
    keyed one is where Kafka's default partitioner (murmur2) puts its key
    (:func:`check_partition`). Returns topic -> (records in the wrong partition,
    records sampled, the first one's reason) for the topics with any: a producer with another
    partitioner (librdkafka's CRC32 default) named before the join answers wrong. Without a
    group, reads only; a partition not read within ``timeout_s`` is sampled as far as it got."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers(broker_url), enable_auto_commit=False, **(auth or {})
    )
    await consumer.start()
    try:
        existing = await consumer.topics()
        tps = [
            TopicPartition(t, p)
            for t in topics
            if t in existing
            for p in sorted(consumer.partitions_for_topic(t) or ())
        ]
        if not tps:
            return {}
        counts = {t: len(consumer.partitions_for_topic(t) or ()) for t in {tp.topic for tp in tps}}
        consumer.assign(tps)
        begin, end = await consumer.beginning_offsets(tps), await consumer.end_offsets(tps)
        todo = {tp for tp in tps if end[tp] > begin[tp]}
        for tp in todo:
            consumer.seek(tp, max(begin[tp], end[tp] - per_partition))
        found: dict[str, list[Any]] = {}
        deadline = asyncio.get_running_loop().time() + timeout_s
        while todo and asyncio.get_running_loop().time() < deadline:
            got = await consumer.getmany(*todo, timeout_ms=500)
            for tp, records in got.items():
                for r in records:
                    if r.offset < end[tp]:
                        seen = found.setdefault(tp.topic, [0, 0, ""])
                        seen[1] += r.key is not None
                        why = check_partition(r.key, tp.partition, counts[tp.topic])
                        if why is not None:
                            seen[0] += 1
                            seen[2] = seen[2] or why
                if records and records[-1].offset >= end[tp] - 1:
                    todo.discard(tp)
            todo = {tp for tp in todo if await consumer.position(tp) < end[tp]}
        return {t: (n, m, why) for t, (n, m, why) in found.items() if n}
    finally:
        await consumer.stop()


async def warn_of_partitioners(
    broker_url: str, topics: Iterable[str], auth: Mapping[str, Any] | None = None
) -> dict[str, tuple]:
    """:func:`sample_partitioner`, each topic with records in the wrong partition logged as an
    ERROR that names the producer fix (the records themselves are dead-lettered as they come:
    app.inputs.admission). A broker that cannot be sampled is a warning, not a refusal to start."""
    try:
        wrong = await sample_partitioner(broker_url, topics, auth)
    except Exception as exc:  # the start goes on: every record is still checked at the door
        log.warning("could not sample the input topics' partitioner at start: %r", exc)
        return {}
    for topic, (n, sampled, why) in sorted(wrong.items()):
        log.error(
            "input topic %s: %d of the %d keyed records sampled at start are not in the "
            "partition Kafka's default partitioner gives their key; they and every such "
            "record will be dead letters, not joined. First: %s",
            topic,
            n,
            sampled,
            why,
        )
    return wrong

"""Refuse to start when joined input topics are not co-partitioned.

Faust's assignor silently groups topics by partition count: two joined topics with different
counts land on different workers and the join quietly misses records. So the worker checks the
broker's metadata before it starts consuming and stops with a message that names the topics.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from aiokafka import AIOKafkaConsumer


class CopartitionError(RuntimeError):
    """Joined topics exist with partition counts that cannot be joined."""


def bootstrap_servers(broker_url: str) -> str:
    """``kafka://h1:9092;kafka://h2:9092`` (Faust form) -> ``h1:9092,h2:9092`` (aiokafka form)."""
    hosts = []
    for part in broker_url.replace(";", ",").split(","):
        part = part.strip()
        if part:
            hosts.append(part.split("://", 1)[-1].rstrip("/"))
    return ",".join(hosts)


def check_groups(counts: Mapping[str, int], groups: Iterable[Iterable[str]], expected: int) -> None:
    """Pure check: ``counts`` are the partition counts of the topics that exist.

    Every group must agree, and with ``expected`` (ETJ_PARTITIONS): Faust creates the missing
    members of a group and the tables' changelogs with that count.
    """
    problems = []
    for group in groups:
        group = list(group)
        present = {t: counts[t] for t in group if t in counts}
        if len(set(present.values()) | {expected}) > 1:
            listed = ", ".join(f"{t} has {n}" for t, n in present.items())
            problems.append(
                f"co-partitioned topics {', '.join(group)} disagree: {listed} "
                f"(ETJ_PARTITIONS={expected})"
            )
    if problems:
        raise CopartitionError(
            "etj refuses to start: "
            + "; ".join(problems)
            + ". Topics that are joined must share their key and partition count: recreate the "
            "odd topic with the same count, or set ETJ_PARTITIONS to the existing count."
        )


async def fetch_partition_counts(broker_url: str, topics: Iterable[str],
                                 auth: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Partition count of each of ``topics`` that exists (metadata only, creates nothing).

    ``auth``: TLS/SASL keyword arguments of the client (:func:`app.kafka_security.aiokafka_auth`).
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers(broker_url),
                                enable_auto_commit=False, **(auth or {}))
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


async def check_copartitioning(broker_url: str, groups: list[tuple[str, ...]],
                               expected: int, auth: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`CopartitionError` if any group of joined topics disagrees."""
    counts = await fetch_partition_counts(broker_url, {t for g in groups for t in g}, auth)
    check_groups(counts, groups, expected)

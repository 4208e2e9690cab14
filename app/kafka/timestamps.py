"""Which timestamp a topic's records carry: a join spec side timed by the Kafka timestamp
(``"time": "$timestamp"``, docs/joins/declarative.md#records-shaped-otherwise) needs the
producer's (``CreateTime``); with ``message.timestamp.type=LogAppendTime`` the broker stamps each
record when it appends it, and the join would read arrival times as event times, silently.

The worker names such a topic at start with a WARNING (not a refusal: a topic whose producers
stamp arrival times on purpose is a choice; a broker that does not answer DescribeConfigs is
"unknown", and the start goes on); ``faust -A app.main topics create`` prints the same.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from app.kafka.connection import bootstrap_servers

log = logging.getLogger(__name__)

__all__ = ["timestamp_types", "warn_of_log_append_time"]


async def timestamp_types(admin: AIOKafkaAdminClient, topics: Iterable[str]) -> dict[str, str]:
    """Topic -> its ``message.timestamp.type`` ("unknown" when the broker does not say)."""
    topics = list(topics)
    out = dict.fromkeys(topics, "unknown")
    if not topics:
        return out
    try:
        found = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        )
        for response in found:
            for resource in response.resources:
                name, configs = resource[3], resource[4]
                for entry in configs:
                    if entry[0] == "message.timestamp.type" and entry[1]:
                        out[name] = entry[1]
    except Exception as exc:
        log.debug("DescribeConfigs of %s failed: %r", topics, exc)
    return out


def reason(topic: str, kind: str) -> str:
    return (
        f"input topic {topic}: a join's event time is its Kafka timestamp ($timestamp) and "
        f"its message.timestamp.type is {kind}: it must be CreateTime (with LogAppendTime "
        "the event time is the time the broker appended the record)"
    )


async def warn_of_log_append_time(
    broker_url: str, topics: Iterable[str], auth: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Log a WARNING for each of ``topics`` not known to carry CreateTime; topic -> its type."""
    topics = list(topics)
    if not topics:
        return {}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers(broker_url), **(auth or {}))
    try:
        await admin.start()
        types = await timestamp_types(admin, topics)
    except Exception as exc:
        log.warning("could not read the timestamp type of %s at start: %r", topics, exc)
        return {}
    finally:
        await admin.close()
    for topic, kind in sorted(types.items()):
        if kind != "CreateTime":
            log.warning("%s", reason(topic, kind))
    return types

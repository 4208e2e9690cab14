"""Where a Kafka client finds the brokers: the bootstrap servers of ``ETJ_BROKER_URL``.

Faust takes the broker URL in its own form (``kafka://h1:9092;kafka://h2:9092``); every other
Kafka client etj opens (the co-partition check, the tools under ``app/commands``, the batch
twin's publisher and bootstrap job, the example consumer, the tests) takes aiokafka's
(``h1:9092,h2:9092``). No Faust import.
"""

from __future__ import annotations

__all__ = ["bootstrap_servers"]


def bootstrap_servers(broker_url: str) -> str:
    """``kafka://h1:9092;kafka://h2:9092`` (Faust form) -> ``h1:9092,h2:9092`` (aiokafka form)."""
    hosts = []
    for part in broker_url.replace(";", ",").split(","):
        part = part.strip()
        if part:
            hosts.append(part.split("://", 1)[-1].rstrip("/"))
    return ",".join(hosts)

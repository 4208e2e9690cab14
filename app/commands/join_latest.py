"""``faust -A app.main join-latest NAME``: a join's answer so far, one JSON line per join id.

Reads the join's output topic from the beginning and applies the consumer rule of the revision
log (the highest revision per id wins), so a person can check a new spec without writing a
consumer. Stops once no record came for ``--idle-s`` seconds.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from faust.cli import argument, option

from app.faust_app import app, settings
from app.kafka.connection import bootstrap_servers
from app.kafka.security import aiokafka_auth
from app.topology import joins


async def latest_revisions(topic: str, idle_s: float) -> dict[str, dict[str, Any]]:
    """Join id -> its highest revision in ``topic`` (read from the beginning until idle)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers(settings.broker_url),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **aiokafka_auth(settings),
    )
    await consumer.start()
    latest: dict[str, dict[str, Any]] = {}
    try:
        if topic not in await consumer.topics():
            return latest
        consumer.assign(
            [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        )
        await consumer.seek_to_beginning()
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for msgs in (await consumer.getmany(timeout_ms=300)).values():
                for m in msgs:
                    last = time.monotonic()
                    rev = json.loads(m.value)
                    if rev["id"] not in latest or rev["revision"] >= latest[rev["id"]]["revision"]:
                        latest[rev["id"]] = rev
        return latest
    finally:
        await consumer.stop()


@app.command(
    argument("name"),
    option("--idle-s", type=float, default=2.0, help="Stop after this long without a new record."),
)
async def join_latest(self: object, name: str, idle_s: float) -> None:
    """Print the latest revision per join id of join spec NAME, sorted by id."""
    if name not in joins:
        raise SystemExit(f"no join spec {name!r}; this worker runs: {', '.join(joins)}")
    latest = await latest_revisions(joins[name].spec.output, idle_s)
    for jid in sorted(latest):
        print(json.dumps(latest[jid]), flush=True)

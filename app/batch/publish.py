"""Load side of the backfill: revisions onto the output topic, and the ledger of what was sent.

A foreign-key join's delete (a row ``{"_key": the left key's text, "_deleted_at": its time}``,
as the ``archive`` command writes one) is sent as the stream sends it: a tombstone keyed by the
left key, with its ``etj-deleted-at`` header; the ledger keeps the same row, which the next run
reads as that delete.

Revisions are keyed by join id with the producer's default partitioner (murmur2, as Faust's
producer), so a backfill revision lands on the same partition as the stream's revisions of that
id: a consumer reading the partition sees them in the order they were written.

The ledger (optional, JSON lines) is appended *after* the broker acknowledged every record. A
crash in between re-publishes the same revisions on the next run, with the same numbers and the
same answers — a repeat the revision-log contract allows, never a different answer
under an old number.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from app.kafka.connection import bootstrap_servers
from app.kafka.security import aiokafka_auth
from app.logic.fk_join import DELETED_AT
from app.settings import get_settings


def _delete_headers(v: dict[str, Any]) -> list[tuple[str, bytes]]:
    """A foreign-key delete's header, as the stream writes it (app.agents.fk_join)."""
    return [(DELETED_AT, str(v["_deleted_at"]).encode())]


async def _send_all(
    broker_url: str, topic: str, values: list[dict[str, Any]], key_field: str
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers(broker_url), **aiokafka_auth(get_settings())
    )
    await producer.start()
    try:
        pending = [
            await producer.send(
                topic, None, key=str(v["_key"]).encode(), headers=_delete_headers(v)
            )
            if "_deleted_at" in v
            else await producer.send(topic, json.dumps(v).encode(), key=str(v[key_field]).encode())
            for v in values
        ]
        await producer.flush()
        for fut in pending:  # raise the first failure instead of reporting success
            await fut
    finally:
        await producer.stop()


def publish(
    broker_url: str,
    topic: str,
    values: Iterable[dict[str, Any]],
    key_field: str = "id",
    ledger: str | Path | None = None,
) -> int:
    """Send ``values`` (JSON) keyed by ``key_field``; then append them to ``ledger``."""
    batch = list(values)
    if not batch:
        return 0
    asyncio.run(_send_all(broker_url, topic, batch, key_field))
    if ledger is not None:
        append_ledger(ledger, batch)
    return len(batch)


def append_ledger(path: str | Path, values: Iterable[dict[str, Any]]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for v in values:
            f.write(json.dumps(v) + "\n")

"""``start`` through a repartition hop (issue Z): on a side with ``"repartition": true``,
``"start": "latest"`` applies to the hop's read of the user's topic. Records produced before the
worker's first start (some in one producer batch, as a real producer sends them) are not joined;
records produced after are; a restart resumes where the first start committed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiokafka import AIOKafkaProducer

from app.joins.resolve import resolve
from tests.harness import Names, bootstrap, create_topic, read_all, wait_for

BASE = 1_790_000_000_000


def spec(prefix: str) -> dict[str, Any]:
    return {
        "name": "hopstart",
        "events": {
            "topic": f"{prefix}-views",
            "key": "user",
            "time": "at",
            "id": "id",
            "start": "latest",
            "repartition": True,
            "fields": {"id": "str", "user": "str", "at": "time"},
            "copy": ["user", "at"],
        },
        "dimension": {
            "topic": f"{prefix}-tiers",
            "key": "user",
            "time": "at",
            "fields": {"user": "str", "tier": "str", "at": "time"},
            "copy": ["tier"],
            "time_as": "tier_time",
        },
        "output": f"{prefix}-hopstart-out",
        "ticks": f"{prefix}-hopstart-ticks",
        "retention_ms": 10**12,
    }


def view(i: int, kind: str) -> tuple[bytes, dict[str, Any]]:
    """A view keyed by a session id (not the join key: the hop re-keys it)."""
    return f"session-{i}".encode(), {"id": f"{kind}{i}", "user": f"u{i % 4}", "at": BASE + 1 + i}


async def send(names: Names, topic: str, records: list[tuple[bytes, dict]], batch: bool) -> None:
    """In order; ``batch``: in as few producer batches as the client makes (not one by one)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap(names), linger_ms=50, **names.client_auth()
    )
    await producer.start()
    try:
        if batch:
            sent = [await producer.send(topic, json.dumps(v).encode(), key=k) for k, v in records]
            await asyncio.gather(*sent)
        else:
            for k, v in records:
                await producer.send_and_wait(topic, json.dumps(v).encode(), key=k)
    finally:
        await producer.stop()


def test_a_latest_start_on_a_repartitioned_side_skips_the_history_of_the_users_topic(
    names: Names, worker_factory, tmp_path
):
    raw = spec(names.prefix)
    s = resolve(raw, app_id=names.app_id)
    asyncio.run(create_topic(names, s.events.topic, 3))  # any count: the hop re-keys it
    asyncio.run(create_topic(names, s.dimension.topic, 4))  # ETJ_PARTITIONS
    tiers = [(f"u{i}".encode(), {"user": f"u{i}", "tier": "gold", "at": BASE}) for i in range(4)]
    asyncio.run(send(names, s.dimension.topic, tiers, batch=False))
    old = [view(i, "old") for i in range(200)]
    asyncio.run(send(names, s.events.topic, old, batch=True))
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    w = worker_factory(names, joins_file=path).wait_ready()

    probes = iter(range(1000))

    async def probed() -> bool:  # until the hop has seeked: one probe joined
        await send(names, s.events.topic, [view(next(probes), "probe")], batch=False)
        ids = {v["id"] for _, v in await read_all(names, s.output, idle_s=0.5)}
        return any(i.startswith("probe") for i in ids)

    assert asyncio.run(wait_for(probed, timeout_s=120, every_s=2)), w.log()[-3000:]
    new = [view(i, "new") for i in range(20)]
    asyncio.run(send(names, s.events.topic, new, batch=True))

    async def after() -> bool:
        ids = {v["id"] for _, v in await read_all(names, s.output, idle_s=0.5)}
        return {f"new{i}" for i in range(20)} <= ids

    assert asyncio.run(wait_for(after, timeout_s=90))
    out = [v for _, v in asyncio.run(read_all(names, s.output, idle_s=1.0))]
    joined_old = sorted({v["id"] for v in out if v["id"].startswith("old")})
    assert not joined_old, f"{len(joined_old)} of 200 older views joined: {joined_old[:5]}"
    assert all(v["tier"] == "gold" for v in out)  # the dimension's history was read
    assert f"{s.events.topic}[" in w.log() and "no committed offset, starting at" in w.log()

    # a restart resumes where the first start committed: what came while it was down is joined
    w.stop()
    down = [view(i, "down") for i in range(5)]
    asyncio.run(send(names, s.events.topic, down, batch=False))
    worker_factory(names, name="w2", joins_file=path).wait_ready()

    async def resumed() -> bool:
        ids = {v["id"] for _, v in await read_all(names, s.output, idle_s=0.5)}
        return {f"down{i}" for i in range(5)} <= ids

    assert asyncio.run(wait_for(resumed, timeout_s=90))

"""Records shaped otherwise, on the real broker (issue U): a spec joins nested records timed by
ISO-8601 strings against a dimension timed by the Kafka record timestamp, exactly as the oracle
says; a record without a time zone becomes a dead letter that says so; and a ``"start":
"latest"`` side of a new deployment joins only what is produced after it starts."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from app.dev.local_broker import EXISTING_BROKER_ENV
from app.joins.resolve import resolve
from tests.harness import Names, bootstrap, create_topic, latest_by_id, produce, read_all, wait_for
from tests.oracle import Event, exact_answer


def shaped_spec(prefix: str, **top: Any) -> dict[str, Any]:
    return {
        "name": "shaped",
        "events": {
            "topic": f"{prefix}-views",
            "key": "user.id",
            "time": "meta.at",
            "time_format": "iso8601",
            "id": "id",
            "fields": {"id": "str", "user.id": "str", "page": "str", "meta.at": "time"},
            "copy": ["user.id", "page", {"meta.at": "viewed_at"}],
        },
        "dimension": {
            "topic": f"{prefix}-tiers",
            "key": "user",
            "time": "$timestamp",
            "fields": {"user": "str", "tier": "str"},
            "copy": ["tier"],
            "time_as": "tier_time",
        },
        "output": f"{prefix}-shaped-out",
        "ticks": f"{prefix}-shaped-ticks",
        "retention_ms": 10**12,
        **top,
    }


def flat_ms(iso: str) -> int:
    """The oracle's own reading of an ISO time (the standard library's, not the engine's)."""
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


async def produce_at(names: Names, topic: str, records: list[tuple[str, dict, int]]) -> None:
    """(key, value, Kafka timestamp in epoch ms), in order."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await producer.start()
    try:
        for key, value, ts in records:
            await producer.send_and_wait(
                topic, json.dumps(value).encode(), key=key.encode(), timestamp_ms=ts
            )
    finally:
        await producer.stop()


def test_nested_iso_timed_events_join_a_dimension_timed_by_the_kafka_timestamp(
    names: Names, worker_factory, tmp_path
):
    raw = shaped_spec(names.prefix)
    spec = resolve(raw)
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    w = worker_factory(names, joins_file=path).wait_ready()

    base = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    views = [
        (
            "u1",
            {
                "id": "v1",
                "user": {"id": "u1", "name": "Ann"},
                "page": "/",
                "meta": {"at": "2026-01-01T01:00:01+01:00"},
            },
        ),  # base + 1 s
        (
            "u1",
            {
                "id": "v2",
                "user": {"id": "u1"},
                "page": "/pricing",
                "meta": {"at": "2026-01-01T00:00:03.5Z"},
            },
        ),
        (
            "u2",
            {
                "id": "w1",
                "user": {"id": "u2"},
                "page": "/",
                "meta": {"at": "2025-12-31T19:00:02-05:00"},
            },
        ),
        (
            "u2",
            {
                "id": "w2",
                "user": {"id": "u2"},
                "page": "/x",
                "meta": {"at": "2026-01-01T00:00:09Z"},
            },
        ),
    ]
    bad = [
        (
            "u1",
            {"id": "b1", "user": {"id": "u1"}, "page": "/", "meta": {"at": "2026-01-01T00:00:05"}},
        ),  # no zone
        ("u1", {"id": "b2", "page": "/", "meta": {"at": "2026-01-01T00:00:05Z"}}),
    ]
    tiers = [
        ("u1", {"user": "u1", "tier": "gold"}, base + 2000),  # after v1, before v2
        ("u1", {"user": "u1", "tier": "silver"}, base),  # late: before v1
        ("u2", {"user": "u2", "tier": "bronze"}, base + 5000),
    ]
    asyncio.run(produce(names, spec.events.topic, views[:2] + bad))
    asyncio.run(produce_at(names, spec.dimension.topic, tiers))
    asyncio.run(produce(names, spec.events.topic, views[2:]))

    expected = exact_answer(
        spec.rules,
        [(k, [ts, v["tier"]]) for k, v, ts in tiers],
        [Event(k, v["id"], flat_ms(v["meta"]["at"]), (v["page"],)) for k, v in views],
    )
    assert expected["v1"][4] == ("silver",) and expected["v2"][4] == ("gold",)
    assert expected["w1"][4] is None and expected["w2"][4] == ("bronze",)

    async def converged() -> bool:
        latest = latest_by_id(v for _, v in await read_all(names, spec.output, idle_s=0.5))
        return {i: (r["tier"], r["tier_time"]) for i, r in latest.items()} == {
            i: (e[4] and e[4][0], e[5]) for i, e in expected.items()
        }

    assert asyncio.run(wait_for(converged, timeout_s=90))
    latest = latest_by_id(v for _, v in asyncio.run(read_all(names, spec.output, idle_s=0.5)))
    assert latest["v2"]["user_id"] == "u1" and latest["v2"]["viewed_at"] == base + 3500
    assert list(latest["v1"])[:4] == ["id", "user_id", "page", "viewed_at"]

    # the $timestamp topic is named at start (tansu does not say its timestamp type)
    assert (
        f"input topic {spec.dimension.topic}: a join's event time is its Kafka timestamp" in w.log()
    )
    dead = [v for _, v in asyncio.run(read_all(names, names.dead_letter_topic, idle_s=0.5))]
    reasons = {
        json.loads(d["value"])["id"]: d["error"]
        for d in dead
        if d.get("topic") == spec.events.topic
    }
    assert "has no time zone" in reasons["b1"], reasons
    assert "user.id: missing" in reasons["b2"], reasons


def test_a_new_deployment_reading_events_from_latest_joins_only_what_comes_after(
    names: Names, worker_factory, tmp_path
):
    raw = shaped_spec(names.prefix)
    raw["events"]["start"] = "latest"  # the dimension from its earliest: its history counts
    spec = resolve(raw)
    for topic in (spec.events.topic, spec.dimension.topic):
        asyncio.run(create_topic(names, topic, 4))  # ETJ_PARTITIONS
    old = [
        (
            f"u{i}",
            {
                "id": f"old{i}",
                "user": {"id": f"u{i}"},
                "page": "/",
                "meta": {"at": "2026-01-01T00:00:01Z"},
            },
        )
        for i in range(6)
    ]
    asyncio.run(produce(names, spec.events.topic, old))
    asyncio.run(
        produce_at(
            names,
            spec.dimension.topic,
            [(f"u{i}", {"user": f"u{i}", "tier": "gold"}, 1_767_225_600_000) for i in range(6)],
        )
    )
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    w = worker_factory(names, joins_file=path).wait_ready()

    def new(i: int) -> tuple[str, dict[str, Any]]:
        return (
            f"u{i % 6}",
            {
                "id": f"new{i}",
                "user": {"id": f"u{i % 6}"},
                "page": "/",
                "meta": {"at": "2026-01-01T00:00:02Z"},
            },
        )

    async def probed() -> bool:  # until the worker has seeked: one probe joined
        await produce(names, spec.events.topic, [new(0)])
        return any(v["id"] == "new0" for _, v in await read_all(names, spec.output, idle_s=0.5))

    assert asyncio.run(wait_for(probed, timeout_s=90, every_s=2))
    asyncio.run(produce(names, spec.events.topic, [new(i) for i in range(1, 7)]))

    async def after() -> bool:
        ids = {v["id"] for _, v in await read_all(names, spec.output, idle_s=0.5)}
        return {f"new{i}" for i in range(1, 7)} <= ids

    assert asyncio.run(wait_for(after, timeout_s=60))
    out = [v for _, v in asyncio.run(read_all(names, spec.output, idle_s=0.5))]
    assert not [v["id"] for v in out if v["id"].startswith("old")]
    assert all(v["tier"] == "gold" for v in out)  # the dimension's history was read
    assert "no committed offset, starting at" in w.log()


@pytest.mark.skipif(
    not os.environ.get(EXISTING_BROKER_ENV, "").strip(),
    reason="tansu's offsets_for_times answers offset 0 whatever the time "
    "(docs/contributing/tests.md#the-test-broker): runs on a real Kafka "
    "(ETJ_BOOTSTRAP)",
)
def test_a_new_deployment_reading_events_from_a_time_starts_at_the_first_record_at_or_after_it(
    names: Names, worker_factory, tmp_path
):
    """``"start": "<ISO time>"``: per partition, the first offset whose Kafka timestamp is at or
    after it (the broker's offsets-for-times). On tansu every partition starts at 0 (measured:
    the old records were joined), so it runs only against a real Kafka."""
    raw = shaped_spec(names.prefix)
    raw["events"]["start"] = "2026-01-01T00:00:10Z"
    spec = resolve(raw)
    for topic in (spec.events.topic, spec.dimension.topic):
        asyncio.run(create_topic(names, topic, 4))  # ETJ_PARTITIONS
    base = 1_767_225_600_000
    views = [
        (
            f"u{i % 3}",
            {
                "id": f"{'old' if i < 6 else 'new'}{i}",
                "user": {"id": f"u{i % 3}"},
                "page": "/",
                "meta": {"at": "2026-01-01T00:00:20Z"},
            },
            base + (5000 if i < 6 else 10_000 + i),
        )
        for i in range(12)
    ]
    asyncio.run(produce_at(names, spec.events.topic, views))
    asyncio.run(
        produce_at(
            names,
            spec.dimension.topic,
            [(f"u{i}", {"user": f"u{i}", "tier": "gold"}, base) for i in range(3)],
        )
    )
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    worker_factory(names, joins_file=path).wait_ready()

    async def all_new() -> bool:
        ids = {v["id"] for _, v in await read_all(names, spec.output, idle_s=0.5)}
        return {f"new{i}" for i in range(6, 12)} <= ids

    assert asyncio.run(wait_for(all_new, timeout_s=90))
    out = [v["id"] for _, v in asyncio.run(read_all(names, spec.output, idle_s=1.0))]
    assert not [i for i in out if i.startswith("old")], out


def test_a_latest_start_is_committed_so_a_restart_resumes_where_it_started(
    names: Names, worker_factory, tmp_path
):
    """A worker that started from ``latest`` and stopped before any record came must not start
    from a later ``latest`` again: what was produced while it was down is joined."""
    raw = shaped_spec(names.prefix)
    raw["events"]["start"] = "latest"
    spec = resolve(raw)
    for topic in (spec.events.topic, spec.dimension.topic):
        asyncio.run(create_topic(names, topic, 4))  # ETJ_PARTITIONS
    asyncio.run(
        produce_at(
            names, spec.dimension.topic, [("u1", {"user": "u1", "tier": "gold"}, 1_767_225_600_000)]
        )
    )
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    first = worker_factory(names, joins_file=path).wait_ready()

    async def seeked() -> bool:
        return first.log().count(f"{spec.events.topic}[") >= 4

    assert asyncio.run(wait_for(seeked, timeout_s=60, every_s=0.5)), first.log()[-3000:]
    first.stop()
    down = [
        (
            "u1",
            {
                "id": f"down{i}",
                "user": {"id": "u1"},
                "page": "/",
                "meta": {"at": "2026-01-01T00:00:02Z"},
            },
        )
        for i in range(3)
    ]
    asyncio.run(produce(names, spec.events.topic, down))
    worker_factory(names, name="w2", joins_file=path).wait_ready()

    async def joined() -> bool:
        ids = {v["id"] for _, v in await read_all(names, spec.output, idle_s=0.5)}
        return {"down0", "down1", "down2"} <= ids

    assert asyncio.run(wait_for(joined, timeout_s=90))

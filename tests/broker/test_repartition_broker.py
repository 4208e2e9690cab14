"""Any record key, on the real broker (issue 46 item 3): both sides of a spec are keyed by
something else (a session id, or no key at all) and have other partition counts than the join;
the events are nested and ISO-8601-timed, the dimension timed by the Kafka timestamp;
with ``"repartition": true`` they are re-keyed through ``<app id>-<join>-<side>-repartition``
and join exactly as the oracle says, across a kill -9 of the worker mid-stream (records then
sit between the two hops: passed on, their source offsets not committed)."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from app.joins.resolve import resolve
from app.kafka.partitioner import partition_for
from tests.harness import Names, bootstrap, create_topic, latest_by_id, read_all, wait_for
from tests.oracle import Event, exact_answer

BASE = 1_790_000_000_000
USERS = [f"u{i}" for i in range(8)]


def rekeyed_spec(prefix: str) -> dict[str, Any]:
    return {
        "name": "rekeyed",
        "events": {
            "topic": f"{prefix}-clicks",
            "key": "user.id",
            "time": "at",
            "id": "id",
            "time_format": "iso8601",
            "repartition": True,
            "fields": {"id": "str", "user.id": "str", "page": "str", "at": "time"},
            "copy": ["user.id", "page", "at"],
        },
        "dimension": {
            "topic": f"{prefix}-plans",
            "key": "user",
            "time": "$timestamp",
            "repartition": True,
            "fields": {"user": "str", "plan": "str"},
            "copy": ["plan"],
            "time_as": "plan_time",
        },
        "output": f"{prefix}-rekeyed-out",
        "ticks": f"{prefix}-rekeyed-ticks",
        "retention_ms": 10**12,
    }


Record = tuple[bytes | None, dict[str, Any] | None, int]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def traffic(seed: int) -> tuple[list[Record], list[Record]]:
    """(key, value, event time) of clicks and plan versions: keyed by a session id or not at
    all, never by the user id; event times out of order across users. A click writes its
    time in ISO 8601; a plan has none in its value: its time is the Kafka timestamp."""
    rnd = random.Random(seed)
    plans = []
    for u in USERS:
        for _ in range(3):
            plans.append(
                (
                    rnd.choice([None, f"acct-{rnd.randrange(99)}".encode()]),
                    {"user": u, "plan": rnd.choice(["free", "pro", "team"])},
                    BASE + rnd.randrange(0, 60_000),
                )
            )
    clicks = []
    for i in range(160):
        at = BASE + rnd.randrange(0, 60_000)
        clicks.append(
            (
                rnd.choice([None, f"session-{rnd.randrange(999)}".encode()]),
                {
                    "id": f"c{i}",
                    "user": {"id": rnd.choice(USERS)},
                    "page": f"/p{i % 5}",
                    "at": iso(at),
                },
                at,
            )
        )
    return clicks, plans


async def send(names: Names, topic: str, records: list[Record], pace_s: float = 0.0) -> None:
    """Each record with its event time as Kafka timestamp and a header (kept by the hop); a
    ``None`` value is sent as a tombstone (a null value)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await producer.start()
    try:
        for key, value, at in records:
            await producer.send_and_wait(
                topic,
                None if value is None else json.dumps(value).encode(),
                key=key,
                timestamp_ms=at,
                headers=[("origin", b"test")],
            )
            if pace_s:
                await asyncio.sleep(pace_s)
    finally:
        await producer.stop()


async def read_raw(names: Names, topic: str) -> list[Any]:
    """Every record of ``topic`` with its partition, timestamp and headers."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap(names),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **names.client_auth(),
    )
    await consumer.start()
    out: list[Any] = []
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=1500)
            if not batch:
                return out
            out += [m for msgs in batch.values() for m in msgs]
    finally:
        await consumer.stop()


def test_sides_keyed_otherwise_are_repartitioned_and_join_exactly_across_a_kill_9(
    names: Names, worker_factory, tmp_path
):
    raw = rekeyed_spec(names.prefix)
    spec = resolve(raw, app_id=names.app_id)
    asyncio.run(create_topic(names, spec.events.topic, 3))  # not the join's 4: any count
    asyncio.run(create_topic(names, spec.dimension.topic, 1))
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    clicks, plans = traffic(seed=46)
    bad = [
        (b"session-x", {"id": "bad1", "page": "/", "at": iso(BASE)}, BASE),  # no user.id
        (None, {"id": "bad2", "user": {"id": 7}, "page": "/", "at": iso(BASE)}, BASE),
        (
            None,
            {
                "id": "bad3",
                "user": {"id": "u1"},
                "page": "/",  # a time without a zone
                "at": "2026-09-21T10:00:00",
            },
            BASE,
        ),
    ]

    first = worker_factory(names, name="first", joins_file=path).wait_ready()
    asyncio.run(send(names, spec.dimension.topic, plans[:12]))
    asyncio.run(send(names, spec.events.topic, clicks[:60] + bad))

    async def some_joined() -> bool:
        return len(await read_all(names, spec.output, idle_s=0.3)) >= 20

    async def kill_mid_stream() -> None:
        # the first clicks joined: the worker is up and both hops flow; then it is killed
        # while the rest are being sent, and so passed on, joined or in between
        assert await wait_for(some_joined, timeout_s=90, every_s=0.5)
        sending = asyncio.create_task(send(names, spec.events.topic, clicks[60:], pace_s=0.03))
        await asyncio.sleep(0.5)
        assert first.kill() == -9
        assert not sending.done(), "the kill must land while records are still being sent"
        await sending

    asyncio.run(kill_mid_stream())
    asyncio.run(send(names, spec.dimension.topic, plans[12:]))
    worker_factory(names, name="second", joins_file=path).wait_ready()

    expected = exact_answer(
        spec.rules,
        [(v["user"], [at, v["plan"]]) for _, v, at in plans],
        [Event(v["user"]["id"], v["id"], at, (v["page"],)) for _, v, at in clicks],
    )

    async def exact() -> bool:
        latest = latest_by_id(v for _, v in await read_all(names, spec.output, idle_s=0.5))
        return {i: (r["plan"], r["plan_time"]) for i, r in latest.items()} == {
            i: (e[4] and e[4][0], e[5]) for i, e in expected.items()
        }

    assert asyncio.run(wait_for(exact, timeout_s=120, every_s=2))
    revs = [v for _, v in asyncio.run(read_all(names, spec.output, idle_s=0.5))]
    answers: dict[tuple[str, int], set[Any]] = {}
    for r in revs:  # a record passed on twice (the kill) doubles no answer
        answers.setdefault((r["id"], r["revision"]), set()).add((r["plan"], r["plan_time"]))
    assert all(len(a) == 1 for a in answers.values()), answers
    assert any(r["revision"] > 1 for r in revs), "the scenario must contain corrections"

    # the hop: every record re-keyed by its user id, in murmur2's partition of the join's
    # count, passed on with its timestamp and headers; bad ones never reach it
    hopped = asyncio.run(read_raw(names, spec.events.repartition))
    assert {json.loads(m.value)["id"] for m in hopped} == {v["id"] for _, v, _ in clicks}
    for m in hopped:
        value = json.loads(m.value)
        assert m.key == value["user"]["id"].encode()
        assert m.partition == partition_for(m.key, 4)
        assert iso(m.timestamp) == value["at"] and list(m.headers) == [("origin", b"test")]
    dead = [v for _, v in asyncio.run(read_all(names, names.dead_letter_topic, idle_s=0.5))]
    reasons = {json.loads(d["value"])["id"]: d for d in dead if d.get("topic") == spec.events.topic}
    assert "user.id" in reasons["bad1"]["error"] and "user.id" in reasons["bad2"]["error"]
    assert "no time zone" in reasons["bad3"]["error"], reasons["bad3"]
    assert reasons["bad1"]["key"] == "session-x"

"""Dead letters replayed, on the real broker (issue 59 item 4; docs/operating/runbook.md#replay-dead-letters).

A producer puts a page view in a partition that is not the one Kafka's default partitioner gives
its key: the worker dead-letters it (the partitioner rule), and a malformed view beside it.
``faust -A app.main dead-letters replay --dry-run`` says what it would do and sends nothing; the
replay then sends the first back to its input topic, in its key's partition, with its original
timestamp and headers (the fix for a wrong partition is exactly that), and the join answers it
as the oracle does; the malformed one still fails its side's parser: not sent, counted. A second
run from the ``--since`` the first one printed reads nothing again."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from app.joins.resolve import resolve
from app.kafka.partitioner import partition_for
from tests.broker.test_spec_change_broker import spec_of, tier, view
from tests.harness import (
    LOCAL_SETTINGS,
    Names,
    bootstrap,
    create_topic,
    latest_by_id,
    read_all,
    wait_for,
)
from tests.oracle import Event, exact_answer

BASE = 1_790_000_000_000
HEADERS = [("trace", b"t-42"), ("origin", b"\xff")]

#: (key, value, partition: None for the producer's, Kafka timestamp, headers)
Sent = tuple[bytes, Any, "int | None", int, list[tuple[str, bytes]]]


async def send(names: Names, topic: str, records: list[Sent]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await producer.start()
    try:
        for key, value, partition, at, headers in records:
            raw = value if isinstance(value, bytes) else json.dumps(value).encode()
            await producer.send_and_wait(
                topic, raw, key=key, partition=partition, timestamp_ms=at, headers=headers
            )
    finally:
        await producer.stop()


def replay(names: Names, joins_file: Path, *args: str) -> str:
    env = {**os.environ, **names.env, "ETJ_JOINS_FILE": str(joins_file)}
    env["ETJ_DATADIR"] = str(joins_file.parent / "replay-data")
    done = subprocess.run(
        [sys.executable, "-m", "faust", "-A", "app.main", "dead-letters", "replay", *args],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


async def records_of(names: Names, topic: str, key: bytes) -> list[Any]:
    """Every record of ``topic`` with ``key`` (partition, timestamp, headers)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(names), enable_auto_commit=False, **names.client_auth()
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        await consumer.seek_to_beginning()
        end = await consumer.end_offsets(tps)
        out: list[Any] = []
        todo = {tp for tp in tps if end[tp] > 0}
        while todo:
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                out += [m for m in msgs if m.key == key]
            todo = {tp for tp in todo if await consumer.position(tp) < end[tp]}
        return out
    finally:
        await consumer.stop()


def test_a_wrong_partition_dead_letter_is_replayed_to_its_partition_and_a_bad_one_still_fails(
    names: Names, worker_factory, tmp_path
):
    raw = spec_of(names.prefix)
    spec = resolve(raw)
    joins_file = tmp_path / "joins.json"
    joins_file.write_text(json.dumps([raw]))
    for topic in (spec.events.topic, spec.dimension.topic):
        asyncio.run(create_topic(names, topic, 4))
    w = worker_factory(names, joins_file=joins_file, **LOCAL_SETTINGS).wait_ready()

    tiers = [(u, tier(u, BASE + n, "gold")) for n, u in enumerate(["u1", "u2", "u3"])]
    asyncio.run(
        send(names, spec.dimension.topic, [(u.encode(), v, None, BASE, []) for u, v in tiers])
    )
    right = partition_for(b"u1", 4)
    stray = view(1, "u1", BASE + 10_000)  # produced where librdkafka's CRC32 might put it
    malformed = {"id": "v2", "user_id": "u2", "page": 404, "event_time": BASE + 10_000}
    good = [view(3, "u2", BASE + 11_000), view(4, "u3", BASE + 12_000)]
    asyncio.run(
        send(
            names,
            spec.events.topic,
            [
                (b"u1", stray, (right + 1) % 4, BASE + 10_000, HEADERS),
                (b"u2", malformed, None, BASE + 10_000, []),
                *((v["user_id"].encode(), v, None, v["event_time"], []) for v in good),
            ],
        )
    )

    async def dead_letters() -> list[dict[str, Any]]:
        return [v for _, v in await read_all(names, names.dead_letter_topic, idle_s=0.5)]

    assert asyncio.run(wait_for(lambda: _count(dead_letters, 2), timeout_s=90))
    letters = {d["value"] and json.loads(d["value"])["id"]: d for d in asyncio.run(dead_letters())}
    assert "Kafka's default partitioner" in letters["v1"]["error"]
    assert letters["v1"]["timestamp"] == BASE + 10_000  # kept for the replay
    assert letters["v1"]["headers"] == [
        {"key": "trace", "value": "t-42", "value_encoding": "text"},
        {"key": "origin", "value": "/w==", "value_encoding": "base64"},
    ]

    # the plan: nothing sent
    planned = replay(names, joins_file, "--dry-run")
    print("\n" + planned)
    assert "would send 1\nstill failing 1: invalid 1\nskipped 0\n" in planned
    assert len(asyncio.run(records_of(names, spec.events.topic, b"u1"))) == 1

    # the replay: the stray view to its key's partition, as it was; the malformed one not sent
    done = replay(names, joins_file, "--join", "tiers")
    print(done)
    assert "read 2\nsent 1\nstill failing 1: invalid 1\nskipped 0\n" in done
    assert re.search(
        rf"  sent: {spec.events.topic}\[{(right + 1) % 4}\]@\d+ -> partition {right} "
        rf"\(was partition {(right + 1) % 4}\), from the input topic\n",
        done,
    ), done
    assert f"  still fails [invalid]: {spec.events.topic}[" in done and "page" in done
    copies = asyncio.run(records_of(names, spec.events.topic, b"u1"))
    [replayed] = [m for m in copies if m.partition == right]
    assert json.loads(replayed.value) == stray and replayed.timestamp == BASE + 10_000
    assert list(replayed.headers) == HEADERS
    assert len(asyncio.run(records_of(names, spec.events.topic, b"u2"))) == 2  # not sent again

    expected = exact_answer(
        spec.rules,
        [(v["user_id"], [v["event_time"], v["tier"]]) for _, v in tiers],
        [Event(v["user_id"], v["id"], v["event_time"], (v["page"],)) for v in [stray, *good]],
    )

    async def exact() -> bool:
        latest = latest_by_id(v for _, v in await read_all(names, spec.output, idle_s=0.5))
        return {i: (r["tier"], r["tier_event_time"]) for i, r in latest.items()} == {
            i: (e[4] and e[4][0], e[5]) for i, e in expected.items()
        }

    assert asyncio.run(wait_for(exact, timeout_s=90, every_s=2))
    assert len(asyncio.run(dead_letters())) == 2, "the replayed view passed the door"

    # a next run from the --since the replay printed repeats none of them
    since = re.search(r"--since (\d+)", done)
    assert since is not None
    assert "read 0\nsent 0\n" in replay(names, joins_file, "--since", since.group(1))
    assert w.proc is not None and w.proc.poll() is None


async def _count(read: Any, n: int) -> bool:
    return len(await read()) >= n

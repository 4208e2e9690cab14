"""Keys and names as Kafka shops have them, on the real broker (issue Z): page views timed by
an ``@timestamp`` ISO string with a ``+0100``-style zone, identified by ``_id``, carrying their
tenant in a Kafka header and keyed by the composite key (tenant header, ``user.id``), joined to
plans keyed by the same pair; and scores keyed by an int player id joined to levels keyed by it.
Both exact against the oracle; a view keyed with the JSON array written otherwise (a space) is a
dead letter naming the key it should have."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

from aiokafka import AIOKafkaProducer

from app.joins.resolve import resolve
from tests.harness import Names, bootstrap, latest_by_id, read_all, wait_for
from tests.oracle import Event, exact_answer

BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def specs(prefix: str) -> list[dict[str, Any]]:
    tenants = {
        "name": "tenants",
        "events": {
            "topic": f"{prefix}-views",
            "key": ["$header.tenant", "user.id"],
            "time": "@timestamp",
            "time_format": "iso8601",
            "id": "_id",
            "fields": {
                "_id": "str",
                "$header.tenant": "str",
                "user.id": "str",
                "page-path": "str",
                "@timestamp": "time",
            },
            "copy": ["$header.tenant", "user.id", "page-path", "@timestamp"],
        },
        "dimension": {
            "topic": f"{prefix}-plans",
            "key": ["org", "user"],
            "time": "at",
            "fields": {"org": "str", "user": "str", "plan": "str", "at": "time"},
            "copy": ["plan"],
            "time_as": "plan_time",
        },
        "output": f"{prefix}-tenant-views",
        "ticks": f"{prefix}-tenant-ticks",
        "retention_ms": 10**12,
    }
    scores = {
        "name": "scores",
        "events": {
            "topic": f"{prefix}-scores",
            "key": "player",
            "time": "at",
            "id": "sid",
            "fields": {"sid": "str", "player": "int", "score": "int", "at": "time"},
            "copy": ["player", "score", "at"],
        },
        "dimension": {
            "topic": f"{prefix}-levels",
            "key": "player",
            "time": "at",
            "fields": {"player": "int", "level": "str", "at": "time"},
            "copy": ["level"],
            "time_as": "level_time",
        },
        "output": f"{prefix}-scored",
        "ticks": f"{prefix}-score-ticks",
        "retention_ms": 10**12,
    }
    return [tenants, scores]


def composite(*parts: Any) -> str:
    """The oracle's own writing of a composite key (the standard library's JSON, compact)."""
    return json.dumps(list(parts), separators=(",", ":"))


def iso(ms: int, zone: str = "+0100") -> str:
    """An ISO time of epoch ms with a colon-less zone, as some loggers write it."""
    hours = int(zone[1:3]) * (1 if zone[0] == "+" else -1)
    at = dt.datetime.fromtimestamp(ms / 1000, dt.timezone(dt.timedelta(hours=hours)))
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}{zone}"


async def send(
    names: Names, topic: str, records: list[tuple[bytes, dict[str, Any], list[Any]]]
) -> None:
    """(key bytes, value, headers), in order."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await producer.start()
    try:
        for key, value, headers in records:
            await producer.send_and_wait(
                topic, json.dumps(value).encode(), key=key, headers=headers or None
            )
    finally:
        await producer.stop()


def test_composite_header_keys_odd_names_and_int_keys_join_exactly(
    names: Names, worker_factory, tmp_path
):
    raws = specs(names.prefix)
    tenants, scores = (resolve(r) for r in raws)
    path = tmp_path / "joins.json"
    path.write_text(json.dumps(raws))
    worker_factory(names, joins_file=path).wait_ready()

    # 1. views of two tenants' users (one user id in both tenants), out of order
    views = [
        ("acme", "u1", "v1", BASE + 1000),
        ("acme", "u1", "v2", BASE + 5000),
        ("globex", "u1", "v3", BASE + 2000),
        ("acme", "u2", "v4", BASE + 3000),
        ("globex", "u1", "v5", BASE + 500),
    ]
    plans = [
        ("acme", "u1", "free", BASE),
        ("globex", "u1", "pro", BASE + 1500),
        ("acme", "u1", "team", BASE + 4000),  # a correction for v2
        ("acme", "u2", "pro", BASE + 100),
    ]

    def view(tenant: str, user: str, vid: str, t: int) -> tuple[bytes, dict, list]:
        value = {"_id": vid, "user": {"id": user}, "page-path": f"/{vid}", "@timestamp": iso(t)}
        return composite(tenant, user).encode(), value, [("tenant", tenant.encode())]

    asyncio.run(send(names, tenants.events.topic, [view(*v) for v in views[:3]]))
    asyncio.run(
        send(
            names,
            tenants.dimension.topic,
            [
                (composite(o, u).encode(), {"org": o, "user": u, "plan": p, "at": t}, [])
                for o, u, p, t in plans
            ],
        )
    )
    bad_key, bad_value, bad_headers = view("acme", "u9", "bad", BASE)
    asyncio.run(
        send(
            names,
            tenants.events.topic,
            [*(view(*v) for v in views[3:]), (b'["acme", "u9"]', bad_value, bad_headers)],
        )
    )

    # 2. scores keyed by an int player id
    scored = [("s1", 7, 10, BASE + 10), ("s2", 7, 20, BASE + 30), ("s3", 42, 5, BASE + 20)]
    levels = [(7, "bronze", BASE), (7, "silver", BASE + 25), (42, "gold", BASE + 1)]
    asyncio.run(
        send(
            names,
            scores.events.topic,
            [
                (str(p).encode(), {"sid": s, "player": p, "score": n, "at": t}, [])
                for s, p, n, t in scored
            ],
        )
    )
    asyncio.run(
        send(
            names,
            scores.dimension.topic,
            [(str(p).encode(), {"player": p, "level": lv, "at": t}, []) for p, lv, t in levels],
        )
    )

    expected_views = exact_answer(
        tenants.rules,
        [(composite(o, u), [t, p]) for o, u, p, t in plans],
        [Event(composite(tn, u), vid, t, ()) for tn, u, vid, t in views],
    )
    expected_scores = exact_answer(
        scores.rules,
        [(str(p), [t, lv]) for p, lv, t in levels],
        [Event(str(p), s, t, ()) for s, p, _, t in scored],
    )
    assert expected_views["v2"][4] == ("team",) and expected_views["v5"][4] is None

    def answers(latest: dict[str, dict], value: str, at: str) -> dict[str, Any]:
        return {i: (r[value], r[at]) for i, r in latest.items()}

    def wanted(expected: dict[str, tuple]) -> dict[str, Any]:
        return {i: (e[4] and e[4][0], e[5]) for i, e in expected.items()}

    async def converged() -> bool:
        v = latest_by_id(r for _, r in await read_all(names, tenants.output, idle_s=0.5))
        s = latest_by_id(r for _, r in await read_all(names, scores.output, idle_s=0.5))
        return answers(v, "plan", "plan_time") == wanted(expected_views) and answers(
            s, "level", "level_time"
        ) == wanted(expected_scores)

    assert asyncio.run(wait_for(converged, timeout_s=120))
    v = latest_by_id(r for _, r in asyncio.run(read_all(names, tenants.output, idle_s=0.5)))
    assert {k: v["v3"][k] for k in ("tenant", "user_id", "page_path", "timestamp")} == {
        "tenant": "globex",
        "user_id": "u1",
        "page_path": "/v3",
        "timestamp": BASE + 2000,
    }
    s = latest_by_id(r for _, r in asyncio.run(read_all(names, scores.output, idle_s=0.5)))
    assert s["s3"]["player"] == 42  # the int key copied as an int

    dead = [d for _, d in asyncio.run(read_all(names, names.dead_letter_topic, idle_s=0.5))]
    reasons = [d["error"] for d in dead if d.get("topic") == tenants.events.topic]
    assert reasons == [
        """key '["acme", "u9"]' disagrees with ["$header.tenant", "user.id"] '["acme","u9"]'"""
    ], reasons

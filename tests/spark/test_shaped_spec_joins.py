"""The batch twin of a spec whose records are shaped otherwise (issue U): nested events timed
by ISO-8601 strings in several zones, and a dimension timed by the Kafka record timestamp, go
through the ``archive`` command's record handling (the worker's parser: flat, epoch ms, the
timestamp as the time, refusals left out) and the batch join gives the oracle's answer, which
reads the raw records with the standard library, not the engine's code."""

from __future__ import annotations

import datetime as dt
import json

from app.batch.archives import kind_of, read_archive
from app.batch.spec_joins import spec_joins
from app.commands import archive as A
from app.joins.columns import model_columns
from app.joins.resolve import resolve
from tests.oracle import Event, exact_answer

BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z

SPEC = {
    "name": "shaped",
    "events": {
        "topic": "t-views",
        "key": "user.id",
        "time": "meta.at",
        "time_format": "iso8601",
        "id": "id",
        "fields": {"id": "str", "user.id": "str", "page": "str", "meta.at": "time"},
        "copy": ["user.id", "page", {"meta.at": "viewed_at"}],
    },
    "dimension": {
        "topic": "t-tiers",
        "key": "user",
        "time": "$timestamp",
        "fields": {"user": "str", "tier": "str"},
        "copy": ["tier"],
        "time_as": "tier_time",
    },
    "output": "t-shaped-out",
    "ticks": "t-shaped-ticks",
    "retention_ms": 10**12,
}


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


def test_a_shaped_spec_archived_and_joined_in_batch_is_the_oracle_s_answer(spark, tmp_path):
    spec = resolve(SPEC)
    views = [
        (
            "u1",
            {
                "id": "v1",
                "user": {"id": "u1"},
                "page": "/",
                "meta": {"at": "2026-01-01T01:00:01+01:00"},
            },
        ),
        (
            "u1",
            {
                "id": "v2",
                "user": {"id": "u1"},
                "page": "/p",
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
    refused = [
        (
            "u1",
            {"id": "b1", "user": {"id": "u1"}, "page": "/", "meta": {"at": "2026-01-01T00:00:05"}},
        )
    ]  # no zone: left out
    tiers = [
        ("u1", {"user": "u1", "tier": "gold"}, BASE + 2000),
        ("u1", {"user": "u1", "tier": "silver"}, BASE),
        ("u2", {"user": "u2", "tier": "bronze"}, BASE + 5000),
        ("u2", {"user": "u2", "tier": "iron"}, BASE + 5000),
    ]  # a tie: the greatest wins

    def archived(name: str, model, records) -> str:
        path = tmp_path / f"{name}.jsonl"
        sink, stats = A.JsonLinesSink(path), A.ArchiveStats()
        for offset, (key, value, ts) in enumerate(records):
            A._archive_one(
                sink,
                0,
                offset,
                model,
                key.encode(),
                json.dumps(value).encode(),
                stats,
                timestamp=ts,
            )
        sink.close()
        return str(path)

    events = archived("views", spec.events, [(k, v, BASE) for k, v in views + refused])
    dims = archived("tiers", spec.dimension, tiers)
    ev = read_archive(spark, events, kind_of("views", model_columns(spec.events.model)))
    dm = read_archive(spark, dims, kind_of("tiers", model_columns(spec.dimension.model)))
    got = {
        r["id"]: (r["user_id"], r["viewed_at"], r["tier"], r["tier_time"])
        for r in spec_joins(spec, ev, dm).collect()
    }

    expected = exact_answer(
        spec.rules,
        [(k, [ts, v["tier"]]) for k, v, ts in tiers],
        [Event(k, v["id"], ms(v["meta"]["at"]), (v["page"],)) for k, v in views],
    )
    assert got == {i: (e[1], e[2], e[4] and e[4][0], e[5]) for i, e in expected.items()}
    assert got["v1"][2] == "silver" and got["w2"][2] == "iron" and got["w1"][2] is None


def test_composite_header_int_keys_and_json_fields_archived_and_joined_in_batch(spark, tmp_path):
    """Issue Z's shapes through the batch twin: views keyed by (tenant header, ``user.id``),
    timed by ``@timestamp`` with a colon-less zone, carrying a ``json`` cart, archived with
    their headers as the worker reads them; plans keyed by the same pair; the batch join is
    the oracle's answer, the cart the JSON text of the object."""
    raw = {
        "name": "tenants",
        "events": {
            "topic": "t-views",
            "key": ["$header.tenant", "user.id"],
            "time": "@timestamp",
            "time_format": "iso8601",
            "id": "_id",
            "fields": {
                "_id": "str",
                "$header.tenant": "str",
                "user.id": "int",
                "cart": "json?",
                "@timestamp": "time",
            },
            "copy": ["$header.tenant", "user.id", "cart", "@timestamp"],
        },
        "dimension": {
            "topic": "t-plans",
            "key": ["org", "user"],
            "time": "at",
            "fields": {"org": "str", "user": "int", "plan": "str", "at": "time"},
            "copy": ["plan"],
            "time_as": "plan_time",
        },
        "output": "t-tenant-out",
        "ticks": "t-tenant-ticks",
        "retention_ms": 10**12,
    }
    spec = resolve(raw)
    views = [  # (tenant, user, id, time, cart)
        ("acme", 1, "v1", "2026-01-01T01:00:01+0100", {"items": [1, 2]}),
        ("acme", 1, "v2", "2026-01-01T00:00:05z", None),
        ("globex", 1, "v3", "2026-01-01T00:00:02+00", ["x"]),
    ]
    plans = [
        ("acme", 1, "free", BASE),
        ("acme", 1, "team", BASE + 4000),
        ("globex", 1, "pro", BASE),
    ]

    def key(*parts) -> bytes:
        return json.dumps(list(parts), separators=(",", ":")).encode()

    def archived(name: str, side, records) -> str:
        path = tmp_path / f"{name}.jsonl"
        sink, stats = A.JsonLinesSink(path), A.ArchiveStats()
        for offset, (k, value, headers) in enumerate(records):
            A._archive_one(
                sink, 0, offset, side, k, json.dumps(value).encode(), stats, BASE, headers=headers
            )
        sink.close()
        assert stats.written == len(records), stats
        return str(path)

    events = archived(
        "tviews",
        spec.events,
        [
            (
                key(t, u),
                {"_id": i, "user": {"id": u}, "@timestamp": at, **({"cart": c} if c else {})},
                [("tenant", t.encode())],
            )
            for t, u, i, at, c in views
        ],
    )
    dims = archived(
        "tplans",
        spec.dimension,
        [(key(o, u), {"org": o, "user": u, "plan": p, "at": t}, []) for o, u, p, t in plans],
    )
    ev = read_archive(spark, events, kind_of("tviews", model_columns(spec.events.model)))
    dm = read_archive(spark, dims, kind_of("tplans", model_columns(spec.dimension.model)))
    rows = {r["id"]: r for r in spec_joins(spec, ev, dm).collect()}

    expected = exact_answer(
        spec.rules,
        [(key(o, u).decode(), [t, p]) for o, u, p, t in plans],
        [Event(key(t, u).decode(), i, ms(at.replace("z", "Z")), ()) for t, u, i, at, _ in views],
    )
    assert {i: (r["plan"], r["plan_time"], r["timestamp"]) for i, r in rows.items()} == {
        i: (e[4] and e[4][0], e[5], e[2]) for i, e in expected.items()
    }
    assert (rows["v1"]["tenant"], rows["v1"]["user_id"]) == ("acme", 1)
    assert json.loads(rows["v1"]["cart"]) == {"items": [1, 2]} and rows["v2"]["cart"] is None
    assert json.loads(rows["v3"]["cart"]) == ["x"]

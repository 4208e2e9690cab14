"""A user's foreign-key join from a joins file, on the real broker (issue 46, item 5): orders
whose customer is nested and whose time is an ISO string × customers timed by their Kafka
timestamp (the spec of docs/joins/declarative.md#foreign-key-joins). A left change moves the row
(DEL/ADD on the moves topic), a right change re-joins its rows, old versions arriving late change
nothing, bad records are dead letters; what a consumer keeps per order (the consumer rule) is
exactly the oracle's view."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

from app.joins.fk_spec import resolve_fk
from tests.broker.test_spec_shapes_broker import produce_at
from tests.docs.pages import DOCS, block
from tests.harness import Names, create_topic, produce, read_all, wait_for

BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def user_spec(prefix: str) -> dict[str, Any]:
    """The page's example, its topics prefixed for this test."""
    raw = json.loads(block(DOCS / "joins" / "declarative.md", "fk-spec"))
    for side in ("left", "right"):
        raw[side]["topic"] = f"{prefix}-{raw[side]['topic']}"
    for t in ("output", "moves", "ticks"):
        raw[t] = f"{prefix}-{raw[t]}"
    return raw


def order(oid: str, customer: str, amount: float, at_s: int) -> tuple[str, dict[str, Any]]:
    iso = dt.datetime.fromtimestamp(BASE / 1000 + at_s, dt.UTC).isoformat()
    return oid, {"order_id": oid, "customer": {"id": customer}, "amount": amount, "placed_at": iso}


def oracle(
    orders: list[tuple[str, dict[str, Any]]], customers: list[tuple[str, dict[str, Any], int]]
) -> dict[str, dict[str, Any]]:
    """Per order its newest version by (time, customer, amount), with that customer's newest
    region by (Kafka timestamp, region): written here again, from the records as sent."""
    newest: dict[str, tuple[int, str, float]] = {}
    for oid, v in orders:
        t = int(dt.datetime.fromisoformat(v["placed_at"]).timestamp() * 1000)
        newest[oid] = max(newest.get(oid, (-1, "", 0.0)), (t, v["customer"]["id"], v["amount"]))
    region: dict[str, tuple[int, str]] = {}
    for cid, v, ts in customers:
        region[cid] = max(region.get(cid, (-1, "")), (ts, v["region"]))
    out = {}
    for oid, (t, cid, amount) in newest.items():
        r = region.get(cid)
        out[oid] = {
            "order_id": oid,
            "customer_id": cid,
            "amount": amount,
            "region": r and r[1],
            "order_time": t,
            "region_time": r and r[0],
        }
    return out


def consumer_view(outputs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The consumer rule: per order the greatest (order_time, customer_id, amount, then the
    region's time and value, none below any), later records winning ties."""

    def rank(o: dict[str, Any]) -> tuple[Any, ...]:
        right = (-1,) if o["region_time"] is None else (o["region_time"], o["region"])
        return (o["order_time"], o["customer_id"], o["amount"], *right)

    best: dict[str, dict[str, Any]] = {}
    for o in outputs:
        if o["order_id"] not in best or rank(o) >= rank(best[o["order_id"]]):
            best[o["order_id"]] = o
    return best


def test_a_users_foreign_key_join_is_exact_against_the_oracle(
    names: Names, worker_factory, tmp_path
):
    raw = user_spec(names.prefix)
    spec = resolve_fk(raw)
    for topic in (spec.left.topic, spec.right.topic):
        asyncio.run(create_topic(names, topic, 4))  # ETJ_PARTITIONS
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    w = worker_factory(names, joins_file=path).wait_ready()

    customers = [
        ("c1", {"customer_id": "c1", "region": "eu"}, BASE),
        ("c2", {"customer_id": "c2", "region": "us"}, BASE + 1000),
        ("c10", {"customer_id": "c10", "region": "asia"}, BASE),
    ]
    first = [
        order("o1", "c1", 10.0, 10),
        order("o2", "c1", 20.0, 11),
        order("o3", "c2", 30.0, 12),
        order("o4", "c9", 40.0, 13),  # c9: no customer
        order("o5", "c10", 50.0, 14),
    ]
    bad = [
        (
            "b1",
            {
                "order_id": "b1",
                "customer": {"id": "c1"},
                "amount": 1.0,
                "placed_at": "2026-01-01T00:00:05",
            },
        ),  # no time zone
        ("b2", {"order_id": "b2", "amount": 1.0, "placed_at": "2026-01-01T00:00:05Z"}),
    ]
    # a left change (o1 moves to c2), an old version arriving late (o2 back to c2: ignored)
    later = [order("o1", "c2", 10.0, 30), order("o2", "c2", 20.0, 5), order("o3", "c2", 35.0, 31)]
    # a right change (c1 re-joins o2), an old version arriving late (c2: ignored)
    changes = [
        ("c1", {"customer_id": "c1", "region": "eu-west"}, BASE + 5000),
        ("c2", {"customer_id": "c2", "region": "old"}, BASE - 1000),
    ]

    asyncio.run(produce_at(names, spec.right.topic, customers))
    asyncio.run(produce(names, spec.left.topic, first + bad))
    asyncio.run(produce(names, spec.left.topic, later))
    asyncio.run(produce_at(names, spec.right.topic, changes))

    expected = oracle(first + later, customers + changes)
    assert expected["o1"]["region"] == "us" and expected["o2"]["region"] == "eu-west"
    assert expected["o4"]["region"] is None and expected["o5"]["region"] == "asia"

    async def converged() -> bool:
        out = [v for _, v in await read_all(names, spec.output, idle_s=0.5)]
        return consumer_view(out) == expected

    assert asyncio.run(wait_for(converged, timeout_s=120)), w.log()[-3000:]
    out = asyncio.run(read_all(names, spec.output, idle_s=0.5))
    assert all(k == v["order_id"].encode() for k, v in out)  # keyed by the left key
    assert list(out[0][1]) == list(spec.output_fields)

    moves = [v for _, v in asyncio.run(read_all(names, spec.moves, idle_s=0.5))]
    o1 = [
        (m["op"], m["customer_id"], m["left_customer_id"]) for m in moves if m["order_id"] == "o1"
    ]
    assert ("DEL", "c1", "c2") in o1 and ("ADD", "c2", "c2") in o1, o1
    assert not [m for m in moves if m["order_id"] == "o2" and m["left_customer_id"] == "c2"]

    status, body = w.get("/joins/")  # listed with its kind, sides, keys and tables
    listed = {j["name"]: j for j in body["joins"]}["order-regions"] if status == 200 else {}
    assert listed.get("kind") == "foreign-key", (status, body)
    assert (listed["left"]["foreign_key"], listed["tables"]["index"]) == (
        "customer_id",
        "order-regions-index",
    )
    assert listed["counters"]["dead_letters"] == 2

    # looked at by key (its right key, a customer): the customer's version and the orders now
    # pointing at it, each as the output carries it (app.web.join_readers.fk_reader)
    status, body = w.get("/joins/order-regions/c2/")
    assert status == 200, body
    assert [(v["region"], v["event_time"]) for v in body["versions"]] == [("us", BASE + 1000)], body
    assert sorted(j["order_id"] for j in body["joins"]) == sorted(
        o for o, v in expected.items() if v["customer_id"] == "c2"
    ), body
    assert all(j == expected[j["order_id"]] for j in body["joins"]), body
    assert w.get("/joins/order-regions/nobody/")[0] == 404

    dead = [v for _, v in asyncio.run(read_all(names, names.dead_letter_topic, idle_s=0.5))]
    reasons = {
        json.loads(d["value"])["order_id"]: d["error"]
        for d in dead
        if d.get("topic") == spec.left.topic
    }
    assert "has no time zone" in reasons["b1"], reasons
    assert "customer.id: missing" in reasons["b2"], reasons

"""Several dimensions per spec, on the real broker (issue AA): orders × customer tiers ×
product prices (inner) × currency rates, each dimension keyed by its own field of the order,
one spec expanded into three links (app/joins/dimensions.py). Late versions on each dimension
correct it, and tombstones on the customers and the products (deletes: each ends its key's
answer at its Kafka timestamp, some after the orders they take it from) correct it to null, or,
for the inner products, retract the order's join; the output
is one revision log per order carrying all three answers, exact against an oracle that answers
each dimension on its own (ends included) and combines them by id, across a kill -9 of the
worker mid-stream and a rebalance to a second worker (the partitions of every link shared out);
no order has two revisions of one number saying different things."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from app.joins.resolve import resolve_all
from tests.broker.test_repartition_broker import send
from tests.faults import processed
from tests.harness import Names, create_topic, latest_by_id, read_all, wait_for
from tests.oracle import Event, exact_answer
from tests.unit.test_dimensions import orders as spec

BASE = 1_790_000_000_000
KEYS = {
    "customer": [f"c{i}" for i in range(5)],
    "product": [f"p{i}" for i in range(4)],
    "currency": ["eur", "usd", "chf"],
}
ANSWER = {"customer": "tier", "product": "price", "currency": "rate"}

Record = tuple[bytes | None, dict[str, Any] | None, int]  # None: a tombstone


def traffic(seed: int) -> tuple[list[Record], dict[str, list[Record]]]:
    """(key, value, event time) of orders (keyed by nothing useful: their id) and of each
    dimension's versions (keyed by their key), event times out of order; among the customers'
    versions, a tombstone (value ``None``, its Kafka timestamp the end's time) for three of
    them, mid-span, sent after the first six versions; among the products', one for two of
    them 5 s after their first price, sent last (inner: it retracts the joins it takes)."""
    rnd = random.Random(seed)
    versions = {
        dim: [
            (k.encode(), {dim: k, ANSWER[dim]: rnd.choice(["a", "b", "c"]), "at": at}, at)
            for k in keys
            for at in rnd.sample(range(BASE, BASE + 60_000), 3)
        ]
        for dim, keys in KEYS.items()
    }
    for vs in versions.values():
        rnd.shuffle(vs)
    ends = random.Random(seed + 1)  # the same versions and orders as without them
    for k in KEYS["customer"][:3]:
        at = BASE + ends.randrange(15_000, 45_000)
        versions["customer"].insert(
            ends.randrange(6, len(versions["customer"])), (k.encode(), None, at)
        )
    for k in KEYS["product"][:2]:  # 5 s after its first price, sent last: it takes answers
        first = min(at for key, _, at in versions["product"] if key == k.encode())
        versions["product"].append((k.encode(), None, first + 5_000))
    events = []
    for i in range(120):
        at = BASE + rnd.randrange(0, 60_000)
        value = {"id": f"o{i}", "amount": i, "at": at}
        value.update({dim: rnd.choice(keys) for dim, keys in KEYS.items()})
        events.append((value["id"].encode(), value, at))
    return events, versions


#: what a revision says: each dimension's answer and its time
SAID = ("tier", "tier_time", "price", "price_time", "rate", "rate_time")


def fields(r: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(r[f] for f in SAID)


def test_three_dimensions_are_one_revision_log_exact_across_a_kill_9_and_a_rebalance(
    names: Names, worker_factory, tmp_path
):
    raw = spec(prefix=names.prefix)
    links = resolve_all([raw], app_id=names.app_id)
    out = links[-1].output
    for link in links:
        asyncio.run(create_topic(names, link.dimension.topic, 4))  # keyed by the join key
    asyncio.run(create_topic(names, links[0].events.topic, 3))  # re-keyed by the hop
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    events, versions = traffic(seed=58)
    dims = {link.dimension.topic: ANSWER[d] for link, d in zip(links, KEYS, strict=True)}
    topic_of = {d: link.dimension.topic for link, d in zip(links, KEYS, strict=True)}
    assert len(dims) == 3

    first = worker_factory(names, name="first", joins_file=path).wait_ready()
    for d in KEYS:
        asyncio.run(send(names, topic_of[d], versions[d][:6]))
    asyncio.run(send(names, links[0].events.topic, events[:40]))

    async def some_joined() -> bool:
        return len(await read_all(names, out, idle_s=0.3)) >= 15

    async def kill_mid_stream() -> None:
        # the first orders went through all three links; then late versions of each
        # dimension (corrections) and more orders, and a kill while they flow
        assert await wait_for(some_joined, timeout_s=90, every_s=0.5)
        for d in KEYS:
            await send(names, topic_of[d], versions[d][6:9])
        sending = asyncio.create_task(send(names, links[0].events.topic, events[40:], pace_s=0.02))
        await asyncio.sleep(0.5)
        assert first.kill() == -9
        assert not sending.done(), "the kill must land while records are still being sent"
        await sending

    asyncio.run(kill_mid_stream())
    # a fresh process recovers; a second joins: the partitions are shared out again, and the
    # last versions of each dimension (late ones, ends among the customers') reach both
    second = worker_factory(names, name="second", joins_file=path).wait_ready()
    third = worker_factory(names, name="third", joins_file=path).wait_ready()
    second.wait_ready(count=2, timeout_s=120)
    for d in KEYS:
        asyncio.run(send(names, topic_of[d], versions[d][9:]))

    # the oracle: each dimension answered on its own (a tombstone: the end [time]), combined
    # by id (inner: price)
    def answers(tombstones: bool) -> dict[str, dict[str, tuple[Any, ...]]]:
        return {
            d: exact_answer(
                link.rules,
                [
                    (k.decode(), [at] if v is None else [at, v[ANSWER[d]]])
                    for k, v, at in versions[d]
                    if v is not None or tombstones
                ],
                [Event(v[d], v["id"], at) for _, v, at in events],
            )
            for link, d in zip(links, KEYS, strict=True)
        }

    each = answers(tombstones=True)
    assert each["customer"] != answers(tombstones=False)["customer"], "the ends must count"

    def said(d: str, i: str) -> tuple[Any, Any]:
        e = each[d][i]
        return (e[4] and e[4][0], e[5])

    expected = {
        i: (*said("customer", i), *said("product", i), *said("currency", i))
        for i in each["product"]
    }
    assert 0 < len(expected) < len(events)  # some orders have no price: inner

    async def exact() -> bool:
        latest = latest_by_id(v for _, v in await read_all(names, out, idle_s=0.5))
        # a null price is no join: the inner product link's retraction (an end took it)
        return {i: fields(r) for i, r in latest.items() if r["price_time"] is not None} == expected

    assert asyncio.run(wait_for(exact, timeout_s=120, every_s=2))
    revs = [v for _, v in asyncio.run(read_all(names, out, idle_s=0.5))]
    answers: dict[tuple[str, int], set[Any]] = {}
    for r in revs:  # a revision passed on twice (the kill) doubles no answer
        answers.setdefault((r["id"], r["revision"]), set()).add(fields(r))
    assert all(len(a) == 1 for a in answers.values()), answers
    by_join: dict[str, set[int]] = {}
    for r in revs:
        by_join.setdefault(r["id"], set()).add(r["revision"])
    assert all(sorted(n) == list(range(1, len(n) + 1)) for n in by_join.values()), by_join
    # each later revision names the dimension whose change made it; only that dimension's
    # answer differs from the revision before, and its previous_<field> is what that said.
    # Except where an earlier link re-sent a revision after a newer one (a kill -9 between its
    # changelog and its sends): the older one changes nothing downstream, so the revision after
    # it may carry two dimensions' changes; such orders show on the link topics, and are only
    # held to naming a dimension
    resent: set[str] = set()
    for link in links[:-1]:
        top: dict[str, int] = {}
        for _, v in asyncio.run(read_all(names, link.output, idle_s=0.5)):
            if v["revision"] < top.get(v["id"], 0):
                resent.add(v["id"])
            top[v["id"]] = max(top.get(v["id"], 0), v["revision"])
    one = {(r["id"], r["revision"]): r for r in revs}
    named: dict[str, int] = {}
    for (i, n), r in one.items():
        if n == 1:
            assert r["dimension"] in (None, *ANSWER), r
            continue
        before, dim = one[(i, n - 1)], r["dimension"]
        assert dim in ANSWER, r  # every order is sent once: no later revision is the order's
        if i in resent:
            continue
        owned = {ANSWER[dim], f"{ANSWER[dim]}_time"}
        changed = {f for f in SAID if r[f] != before[f]}
        assert changed and changed <= owned, (before, r)
        assert r[f"previous_{ANSWER[dim]}"] == before[ANSWER[dim]], (before, r)
        named[dim] = named.get(dim, 0) + 1
    assert set(named) == set(ANSWER), named  # every dimension changed some order
    # corrections came from every dimension: the last link's own, and the earlier ones'
    # carried as <dim>_cause
    assert any(r["cause"] == "late-dimension" for r in revs)
    assert any(r["customer_cause"] == "late-dimension" for r in revs)
    assert any(r["product_cause"] == "late-dimension" for r in revs)
    # the ends took tiers already sent: null tiers after a tier, from the first link
    assert any(r["tier"] is None and r["previous_tier"] is not None for r in revs)
    # and prices already sent: the inner product link's retraction, read and passed on by the
    # currency link as a revision naming the product
    assert any(
        r["price_time"] is None and r["previous_price"] is not None and r["dimension"] == "product"
        for r in revs
    )
    # both workers took records after the rebalance
    assert processed(second) > 0 and processed(third) > 0

"""Joins that feed joins, on the real broker (issue AA item 3): orders × customer tiers, whose
revision log is the events of a second join, × product prices (keyed by product: through the
repartition hop), both in one worker. Late tiers correct the first join, whose new revisions
revise the second; late prices correct the second. Exact against the oracle, join by join,
across a kill -9 of the worker mid-stream (revisions then sit between the joins: sent, their
source offsets not committed, re-sent after the restart)."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from app.joins.resolve import resolve_all
from tests.broker.test_repartition_broker import send
from tests.harness import Names, create_topic, latest_by_id, read_all, wait_for
from tests.oracle import Event, exact_answer
from tests.unit.test_chains import chain

BASE = 1_790_000_000_000
CUSTOMERS = [f"c{i}" for i in range(6)]
PRODUCTS = [f"p{i}" for i in range(5)]

Record = tuple[bytes | None, dict[str, Any], int]


def traffic(seed: int) -> tuple[list[Record], list[Record], list[Record]]:
    """(key, value, event time) of orders, customer tiers and product prices, each keyed by
    its own key; event times out of order."""
    rnd = random.Random(seed)
    tiers = [
        (c.encode(), {"customer": c, "tier": rnd.choice(["basic", "gold"]), "at": at}, at)
        for c in CUSTOMERS
        for at in rnd.sample(range(BASE, BASE + 60_000), 3)
    ]
    prices = [
        (p.encode(), {"product": p, "price": rnd.randrange(1, 100), "at": at}, at)
        for p in PRODUCTS
        for at in rnd.sample(range(BASE, BASE + 60_000), 3)
    ]
    orders = []
    for i in range(150):
        at = BASE + rnd.randrange(0, 60_000)
        c = rnd.choice(CUSTOMERS)
        value = {"id": f"o{i}", "customer": c, "product": rnd.choice(PRODUCTS), "at": at}
        orders.append((c.encode(), value, at))
    rnd.shuffle(tiers)
    rnd.shuffle(prices)
    return orders, tiers, prices


def test_a_join_fed_by_a_join_is_exact_across_a_kill_9(names: Names, worker_factory, tmp_path):
    raws = chain(names.prefix)
    up, down = resolve_all(raws, app_id=names.app_id)
    for topic in (up.events.topic, up.dimension.topic, down.dimension.topic):
        asyncio.run(create_topic(names, topic, 4))  # the joins' count, keyed by the join key
    asyncio.run(create_topic(names, up.output, 3))  # read by the hop: any count
    path = tmp_path / "joins.json"
    path.write_text(json.dumps(raws))
    orders, tiers, prices = traffic(seed=58)

    first = worker_factory(names, name="first", joins_file=path).wait_ready()
    asyncio.run(send(names, up.dimension.topic, tiers[:8]))
    asyncio.run(send(names, down.dimension.topic, prices[:7]))
    asyncio.run(send(names, up.events.topic, orders[:50]))

    async def some_joined() -> bool:
        return len(await read_all(names, down.output, idle_s=0.3)) >= 20

    async def kill_mid_stream() -> None:
        # the first orders went through both joins; then late tiers (corrections upstream,
        # revisions downstream) and more orders, and a kill while they flow
        assert await wait_for(some_joined, timeout_s=90, every_s=0.5)
        await send(names, up.dimension.topic, tiers[8:12])
        sending = asyncio.create_task(send(names, up.events.topic, orders[50:], pace_s=0.02))
        await asyncio.sleep(0.5)
        assert first.kill() == -9
        assert not sending.done(), "the kill must land while records are still being sent"
        await sending

    asyncio.run(kill_mid_stream())
    asyncio.run(send(names, up.dimension.topic, tiers[12:]))
    asyncio.run(send(names, down.dimension.topic, prices[7:]))
    worker_factory(names, name="second", joins_file=path).wait_ready()

    tiered = exact_answer(
        up.rules,
        [(v["customer"], [at, v["tier"]]) for _, v, at in tiers],
        [Event(v["customer"], v["id"], at) for _, v, at in orders],
    )
    by_id = {v["id"]: v for _, v, _ in orders}
    priced = exact_answer(
        down.rules,
        [(v["product"], [at, v["price"]]) for _, v, at in prices],
        [
            Event(by_id[i]["product"], i, t, (answer and answer[0],))
            for i, (_, _, t, _, answer, _) in tiered.items()
        ],
    )
    expected = {i: (e[3][0], e[4] and e[4][0], e[5]) for i, e in priced.items()}

    async def exact() -> bool:
        latest = latest_by_id(v for _, v in await read_all(names, down.output, idle_s=0.5))
        return {i: (r["tier"], r["price"], r["price_time"]) for i, r in latest.items()} == expected

    assert asyncio.run(wait_for(exact, timeout_s=120, every_s=2))
    revs = [v for _, v in asyncio.run(read_all(names, down.output, idle_s=0.5))]
    answers: dict[tuple[str, int], set[Any]] = {}
    for r in revs:  # a revision passed on twice (the kill) doubles no answer
        answers.setdefault((r["id"], r["revision"]), set()).add(
            (r["tier"], r["price"], r["price_time"])
        )
    assert all(len(a) == 1 for a in answers.values()), answers
    # revisions made by the first join's corrections (the same order again, a new tier)
    # and by late prices
    assert any(r["cause"] == "arrival" and r["revision"] > 1 for r in revs)
    assert any(r["cause"] == "late-dimension" for r in revs)
    # each revision of the second join is a change (a revision of the first that changes
    # nothing it reads, a tier's time, makes none), and none is missing
    by_join: dict[str, dict[int, tuple[Any, ...]]] = {}
    for r in revs:
        by_join.setdefault(r["id"], {})[r["revision"]] = (r["tier"], r["price"], r["price_time"])
    for jid, per in by_join.items():
        assert sorted(per) == list(range(1, len(per) + 1)), (jid, per)
        said = [per[n] for n in sorted(per)]
        assert all(a != b for a, b in zip(said, said[1:], strict=False)), (jid, per)

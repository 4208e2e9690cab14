"""Several dimensions per spec (issue AA): orders × customer tier × product price (inner) ×
currency rate, one spec with ``"dimensions"`` (expanded into a chain of three links,
app/joins/dimensions.py) on one worker, over a backlog, against the plain mood join's rate.

The spec is the broker test's (``tests.unit.test_dimensions.orders``, as
tests/broker/test_multi_dimension_broker.py runs it): orders keyed by their own id, so every
dimension is keyed otherwise (the first link reads them through a repartition hop, each later
link the one before through its link topic, keyed for it by the link before: no hop). Orders and every dimension's versions
(a few per key, event times out of order) are in the broker before the worker starts; default
producer batching (a worker on a real Kafka).

Rate = orders ÷ seconds from the first record handed to a link (or the first output) to the
moment every input is consumed and the last output that makes the final answers exact is
written (broker timestamps): the end is the oracle's answer reached, not an idle output, since
the later links still work after the user's inputs are consumed. The oracle is the broker
test's: each dimension answered on its own by ``tests.oracle.exact_answer``, combined by id
(inner: orders with no price have no output).

- ``multi_dimension_rps``: orders per second through all three dimensions;
- ``multi_dimension_ratio``: it ÷ ``throughput_batched_rps`` of the same ``make bench`` run,
  else ÷ the plain mood join's default-batching rate measured here, in the same run, as
  ``bench.throughput`` measures it (goal ≥ 0.33: a dimension costs no more than a whole join);
- ``multi_dimension_exact_share``: the share of orders whose final output is the oracle's.

``python -m bench.multi_dimension [--orders N] [--plain-records N]``
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from app.joins.resolve import resolve_all
from bench.harness import Bench, Figure, Results
from bench.throughput import load_inputs, time_worker
from bench.throughput import workload as mood_workload
from bench.workers import bench_broker, new_names, start_worker, stats, workdir
from tests.harness import batched, latest_by_id
from tests.kafka_io import Got, create_topics, jbytes, produce_bulk, read_topics
from tests.oracle import Event, exact_answer
from tests.unit.test_dimensions import orders as orders_spec

BASE = 1_790_000_000_000
#: the three dimensions: their field of the order, their answer, how many keys
DIMS = {"customer": ("tier", 1_000), "product": ("price", 200), "currency": ("rate", 10)}
VERSIONS_PER_KEY = 3
#: the share of products with no version at all (inner: their orders have no output)
UNPRICED = 0.05
FIELDS = ("tier", "tier_time", "price", "price_time", "rate", "rate_time")


def multi_dimension_ratio(results: Results) -> float | None:
    """The chain's rate ÷ ``bench.throughput``'s default-batching rate when it ran (same
    ``make bench`` run), else ÷ the plain mood join's rate this benchmark measured itself."""
    mine = results.get("multi_dimension") or {}
    rps = mine.get("multi_dimension_rps")
    plain = (results.get("throughput") or {}).get("worker_batched_rate") or mine.get("plain_rps")
    return round(rps / plain, 3) if rps and plain else None


RPS = Figure(
    "multi_dimension_rps",
    unit="orders/s",
    note="default batching, through all 3 dimensions (each keyed otherwise)",
)
RATIO = Figure(
    "multi_dimension_ratio",
    multi_dimension_ratio,
    0.33,
    note="÷ throughput_batched_rps (same run)",
)
EXACT = Figure(
    "multi_dimension_exact_share",
    "exact_share",
    1.0,
    "==",
    note="final answers equal to the oracle's",
)

Record = tuple[str, dict[str, Any]]


def workload(orders: int, seed: int) -> tuple[list[Record], dict[str, list[Record]]]:
    """(key, value) of the orders (keyed by their id) and of each dimension's versions (keyed
    by their key, shuffled: event times out of order)."""
    rnd = random.Random(seed)
    span = max(60_000, orders * 20)
    keys = {d: [f"{d[:2]}{i}" for i in range(n)] for d, (_, n) in DIMS.items()}
    unpriced = set(rnd.sample(keys["product"], int(len(keys["product"]) * UNPRICED)))
    versions: dict[str, list[Record]] = {}
    for d, (answer, _) in DIMS.items():
        vs = [
            (k, {d: k, answer: rnd.choice("abcdefgh"), "at": at})
            for k in keys[d]
            if not (d == "product" and k in unpriced)
            for at in rnd.sample(range(BASE, BASE + span), VERSIONS_PER_KEY)
        ]
        rnd.shuffle(vs)
        versions[d] = vs
    events = []
    for i in range(orders):
        value: dict[str, Any] = {"id": f"o{i}", "amount": i, "at": BASE + rnd.randrange(span)}
        value.update({d: rnd.choice(keys[d]) for d in DIMS})
        events.append((value["id"], value))
    return events, versions


def oracle(
    links: list[Any], events: list[Record], versions: dict[str, list[Record]]
) -> dict[str, tuple[Any, ...]]:
    """Order id -> its final (tier, tier_time, price, price_time, rate, rate_time), as the broker
    test states it: each dimension on its own, combined by id (inner: price)."""
    each = {
        d: exact_answer(
            link.rules,
            [(v[d], [v["at"], v[answer]]) for _, v in versions[d]],
            [Event(v[d], v["id"], v["at"]) for _, v in events],
        )
        for link, (d, (answer, _)) in zip(links, DIMS.items(), strict=True)
    }

    def said(d: str, i: str) -> tuple[Any, Any]:
        e = each[d][i]
        return (e[4] and e[4][0], e[5])

    return {
        i: (*said("customer", i), *said("product", i), *said("currency", i))
        for i in each["product"]
    }


def exact_share(outputs: list[Got], expected: dict[str, tuple[Any, ...]]) -> float:
    final = latest_by_id(o.json() for o in outputs)
    got = {i: tuple(r.get(f) for f in FIELDS) for i, r in final.items()}
    right = sum(1 for i, ans in expected.items() if got.get(i) == ans)
    return right / len(expected) if expected else 0.0


def timed_chain(
    names: Any,
    folder: Path,
    inputs: list[str],
    expected_in: int,
    output: str,
    expected: dict[str, tuple[Any, ...]],
    bootstrap: str,
    timeout_s: float = 300,
    **env: Any,
) -> dict[str, Any]:
    """As :func:`bench.workers.time_to_last_output`, but the end is every input consumed and
    then the output's final answers equal to ``expected`` (or, failing that, the output idle
    for 10 s: the share short of 1 says it)."""
    w = start_worker(names, folder, name="chain", **env)
    try:
        w.wait_ready(timeout_s=120)
        deadline = time.monotonic() + timeout_s
        t_start = None
        while True:
            s = stats(w)
            n = sum((s.get("records_in") or {}).get(t, 0) for t in inputs)
            if n and t_start is None:
                t_start = time.time()
            if n >= expected_in:
                t_end = time.time()
                break
            if w.proc is not None and w.proc.poll() is not None:
                raise RuntimeError(f"worker exited {w.proc.returncode}:\n{w.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker consumed {s} of {expected_in} in {timeout_s} s")
            time.sleep(0.05)
        latest: dict[str, tuple[int, tuple[Any, ...]]] = {}
        seen = [0]
        wrong = [len(expected)]

        def exact(got: list[Got]) -> bool:
            # incremental: only the records read since the last call
            for o in got[seen[0] :]:
                r = o.json()
                rev = r.get("revision", 1)
                before = latest.get(r["id"])
                if before is None or rev >= before[0]:
                    answer = tuple(r.get(f) for f in FIELDS)
                    was = before is not None and expected.get(r["id"]) == before[1]
                    now = expected.get(r["id"]) == answer
                    wrong[0] += was - now
                    latest[r["id"]] = (rev, answer)
            seen[0] = len(got)
            return wrong[0] == 0 and len(latest) == len(expected)

        outs = asyncio.run(
            read_topics(bootstrap, [output], until=exact, timeout_s=timeout_s, idle_s=10)
        )
        final = stats(w)
    finally:
        w.kill()
    if not outs:
        raise RuntimeError(f"the worker emitted nothing to {output}")
    t_first = min(min(o.timestamp_ms for o in outs) / 1000, t_start or t_end)
    t_last = max(o.timestamp_ms for o in outs) / 1000
    return {"seconds": max(t_end, t_last) - t_first, "outputs": outs, "stats": final}


def chain_run(orders: int, seed: int, partitions: int) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        names = batched(new_names(broker, partitions=partitions))
        raw = orders_spec(prefix=names.prefix)
        links = resolve_all([raw], app_id=names.app_id)
        out = links[-1].output
        joins = Path(folder) / "joins.json"
        joins.write_text(json.dumps([raw]))
        events, versions = workload(orders, seed)
        expected = oracle(links, events, versions)
        topic_of = {d: link.dimension.topic for link, d in zip(links, DIMS, strict=True)}
        orders_topic = raw["events"]["topic"]
        asyncio.run(create_topics(broker.bootstrap, [*topic_of.values(), orders_topic], partitions))
        records = [(topic_of[d], k, v) for d, vs in versions.items() for k, v in vs]
        records += [(orders_topic, k, v) for k, v in events]
        asyncio.run(
            produce_bulk(
                broker.bootstrap,
                ((t, k.encode(), jbytes(v)) for t, k, v in records),
                partitions,
            )
        )
        # the user's inputs as the links read them: the first link's events through its hop
        inputs = [links[0].events.repartition or orders_topic, *topic_of.values()]
        t = timed_chain(
            names,
            folder,
            inputs,
            len(records),
            out,
            expected,
            broker.bootstrap,
            joins_file=joins,
        )
    return {
        "orders": orders,
        "versions": len(records) - orders,
        "answered": len(expected),
        "seconds": t["seconds"],
        "rate": orders / t["seconds"],
        "outputs": len(t["outputs"]),
        "exact_share": exact_share(t["outputs"], expected),
    }


def plain_run(records: int, seed: int, partitions: int) -> dict[str, Any]:
    """The mood join on ``records`` records, default batching, as ``bench.throughput`` times
    its batched worker (its workload, 1,000 consultants)."""
    with bench_broker() as broker, workdir() as folder:
        names = batched(new_names(broker, partitions=partitions))
        asyncio.run(
            load_inputs(
                broker.bootstrap, names, mood_workload(records, 1_000, seed + 1000), partitions
            )
        )
        t = time_worker(broker, names, records, folder, name="plain")
    return {"records": records, "seconds": t["seconds"], "rate": records / t["seconds"]}


def run(
    orders: int = 40_000, plain_records: int = 50_000, seed: int = 1, partitions: int = 4
) -> dict[str, Any]:
    """One run of the chain, then one of the plain mood join (``plain_records`` 0: none), each
    on a fresh broker."""
    chain = chain_run(orders, seed, partitions)
    plain = plain_run(plain_records, seed, partitions) if plain_records else None
    result: dict[str, Any] = {
        "name": "multi_dimension",
        "orders": orders,
        "versions": chain["versions"],
        "answered": chain["answered"],
        "partitions": partitions,
        "dimensions": len(DIMS),
        "seconds": round(chain["seconds"], 3),
        "outputs": chain["outputs"],
        "multi_dimension_rps": round(chain["rate"]),
        "exact_share": round(chain["exact_share"], 4),
        "batching": "default",
    }
    if plain is not None:
        result["plain_records"] = plain_records
        result["plain_rps"] = round(plain["rate"])
        result["ratio_to_plain"] = round(chain["rate"] / plain["rate"], 3)
    return result


def report(m: dict[str, Any]) -> str:
    out = (
        f"multi_dimension ({m['orders']:,} orders × {m['dimensions']} dimensions, "
        f"{m['versions']:,} versions): {m['multi_dimension_rps']}/s, exact share "
        f"{m['exact_share']}"
    )
    if "plain_rps" in m:
        out += f"; plain mood join {m['plain_rps']}/s here (ratio {m['ratio_to_plain']})"
    return out


BENCH = Bench(
    "multi_dimension",
    run,
    (RPS, RATIO, EXACT),
    report=report,
    suite=lambda quick, runs: {
        "orders": 5_000 if quick else 40_000,
        # as bench.throughput's batched backlog in --quick: fewer is handled in one batch
        "plain_records": 20_000 if quick else 50_000,
    },
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

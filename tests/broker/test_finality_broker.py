"""Finality on a real broker, through a kill -9 and a rebalance (issue 48, item 3).

Three specs with the mood join's rules, one worker run: ``fin`` emits every revision and
publishes its promises on ``<output>-final``; ``fin-final`` emits only each join's final revision
(``"emit": "final"``); ``held`` holds an unanswered event up to 5 s of stream time
(``hold_ms``; a hold with finality is refused: app.joins.resolve, findings.md). An out-of-order
workload (moods up to 23 s late) is sent; the first
worker is killed -9 mid-stream, a second one recovers, a third joins (a rebalance), then one
event per consultant far in the future makes every join of the workload final.

Read back from the topics: no revision of ``fin`` is produced after a promise of its partition
that covered it (the promise's record is never older than such a revision), promises never go
back, ``fin``'s latest answers are the oracle's and each revision names a record of its partition
(lineage); ``fin-final`` carries one revision per join (a crash may repeat it, never change it),
equal to the oracle's answer; ``held``'s latest answers are the oracle's, no event was
answered null on arrival, and the holds no mood answered in time ended as such.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from app.commands.sample_traffic import sample_moods_and_events
from app.joins.catalog import mood_spec
from app.settings import Settings
from tests.faults import send, wait_processed
from tests.harness import Names, bootstrap, create_topic, latest_by_id, wait_for
from tests.kafka_io import partition_of
from tests.oracle import exact_mood_answer, mood_answer

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(12))
RETENTION_MS = 30_000  # above the workload's disorder (3 s + 20 s): nothing is late
PARTITIONS = 4  # ETJ_PARTITIONS of the tests
HOLD_MS = 5000  # held holds an unanswered event (events arrive at most 3 s out of order)


def spec(names: Names, name: str, **over: Any) -> dict[str, Any]:
    """The mood join's rules on topics of its own (each spec is sent the workload itself;
    specs sharing topics: tests/broker/test_shared_topics_broker.py)."""
    raw = mood_spec(Settings())
    raw["events"] = {**raw["events"], "topic": f"{names.prefix}-{name}-recs"}
    raw["dimension"] = {**raw["dimension"], "topic": f"{names.prefix}-{name}-moods"}
    raw.pop("tables")
    return {
        **raw,
        "name": name,
        "output": f"{names.prefix}-{name}-out",
        "ticks": f"{names.prefix}-{name}-ticks",
        "retention_ms": RETENTION_MS,
        "review_lag_ms": None,
        **over,
    }


async def read_timed(names: Names, topic: str, idle_s: float = 1.5) -> list[tuple[int, Any]]:
    """(Kafka timestamp, decoded value) of every record of ``topic``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(names),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **names.client_auth(),
    )
    await consumer.start()
    out: list[tuple[int, Any]] = []
    try:
        parts = consumer.partitions_for_topic(topic) if topic in await consumer.topics() else None
        if not parts:
            return out
        consumer.assign([TopicPartition(topic, p) for p in parts])
        await consumer.seek_to_beginning()
        loop = asyncio.get_running_loop()
        last = loop.time()
        while loop.time() - last < idle_s:
            for msgs in (await consumer.getmany(timeout_ms=300)).values():
                for m in msgs:
                    out.append((m.timestamp, json.loads(m.value)))
                    last = loop.time()
        return out
    finally:
        await consumer.stop()


async def test_no_revision_after_a_promise_through_a_kill_and_a_rebalance(
    names, worker_factory, tmp_path
):
    fin = spec(names, "fin", finality=True)
    final = spec(names, "fin-final", emit="final")
    held = spec(names, "held", hold_ms=HOLD_MS)
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([fin, final, held]))
    records = sample_moods_and_events(
        seed=48, count=240, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    expected = exact_mood_answer(records)
    topics = [
        {"event": s["events"]["topic"], "mood": s["dimension"]["topic"]} for s in (fin, final, held)
    ]
    for t in topics:
        for topic in t.values():
            await create_topic(names, topic, PARTITIONS)
    first = worker_factory(names, name="first", joins_file=path).wait_ready()

    # 1. traffic flows (the same records to both specs); once a sixth of it is consumed, kill
    #    -9 mid-stream
    sending = asyncio.gather(*(send(names, records, pace_s=0.03, topics=t) for t in topics))
    await asyncio.to_thread(wait_processed, first, len(records) // 2)  # of 3 x 240
    assert first.kill() == -9
    assert not sending.done(), "the kill must land while records are still being sent"
    await sending
    # 2. a fresh process recovers; a third joins: the partitions are shared out again
    second = worker_factory(names, name="second", joins_file=path).wait_ready()
    worker_factory(names, name="third", joins_file=path).wait_ready()
    second.wait_ready(count=2, timeout_s=120)
    # 3. one event per consultant far later: every join of the workload becomes final
    flush = START + 10 * len(records) * 1000
    for t in topics:
        await send(
            names,
            [
                (
                    "event",
                    c,
                    {
                        "consultant": c,
                        "recommendation": "flush",
                        "event_time": flush,
                        "id": f"flush-{c}",
                    },
                )
                for c in CONSULTANTS
            ],
            topics=t,
        )

    missing: list[str] = []

    async def all_final() -> bool:
        got = {v["id"] for _, v in await read_timed(names, final["output"], idle_s=1.0)}
        missing[:] = sorted(set(expected) - got)
        return not missing

    assert await wait_for(all_final, timeout_s=150, every_s=2), (
        f"emit=final never covered {len(missing)} of {len(expected)} joins, e.g. {missing[:6]} "
        f"(their consultants' partitions: "
        f"{sorted({partition_of(expected[j][1].encode(), PARTITIONS) for j in missing})})"
    )

    # emit=final: one revision per join (repeated at most, never changed), the oracle's
    finals: dict[str, set[str]] = {}
    for _, v in await read_timed(names, final["output"]):
        finals.setdefault(v["id"], set()).add(json.dumps(v, sort_keys=True))
    assert set(finals) == set(expected), set(finals) ^ set(expected)
    changed = {jid: vs for jid, vs in finals.items() if len(vs) > 1}
    assert not changed, f"{len(changed)} joins with two final revisions: {list(changed)[:3]}"
    got = {jid: mood_answer(json.loads(next(iter(vs)))) for jid, vs in finals.items()}
    assert got == expected
    # each final revision names the partition whose promise made it final
    assert all(
        json.loads(v)["partition"] == partition_of(expected[jid][1].encode(), PARTITIONS)
        for jid, vs in finals.items()
        for v in vs
    )

    # fin: promises per partition only go forward, and no revision comes after one covering it
    promises = await read_timed(names, f"{fin['output']}-final")
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for ts, v in promises:
        assert v["join"] == "fin"
        seen = by_partition.setdefault(v["partition"], [])
        assert not seen or v["final_before"] >= seen[-1][1], (v, seen[-1])
        seen.append((ts, v["final_before"]))
    assert by_partition and all(
        ps[-1][1] > max(e[2] for e in expected.values())
        for p, ps in by_partition.items()
        if any(partition_of(e[1].encode(), PARTITIONS) == p for e in expected.values())
    )
    revisions = await read_timed(names, fin["output"])
    broken = []
    for ts, r in revisions:
        p = partition_of(r["consultant"].encode(), PARTITIONS)
        first_cover = next(
            (pts for pts, before in by_partition.get(p, ()) if r["event_time"] < before), None
        )
        if first_cover is not None and ts > first_cover:
            broken.append((r["id"], r["revision"], r["event_time"], ts, first_cover))
    assert not broken, f"{len(broken)} revisions after a promise covering them: {broken[:3]}"
    # lineage: each revision names a record of its own partition, of an input of its spec
    inputs = {fin["events"]["topic"], fin["dimension"]["topic"], fin["ticks"]}
    assert all(
        r["source"]["topic"] in inputs
        and r["source"]["offset"] >= 0
        and r["source"]["partition"] == partition_of(r["consultant"].encode(), PARTITIONS)
        # the partition whose promise covers it, on every revision (emit=final ones too)
        and r["partition"] == r["source"]["partition"]
        for _, r in revisions
    )
    latest = latest_by_id(r for _, r in revisions)
    assert {jid: mood_answer(r) for jid, r in latest.items() if jid in expected} == expected
    assert any(r["revision"] > 1 for _, r in revisions), "the workload must have corrections"

    # the bounded hold, through the kill and the rebalance: the oracle's answers; no event was
    # answered null on arrival (each arrived within its hold); those no mood answered in time
    # ended their hold
    async def held_exact() -> list[Any]:
        revs = [r for _, r in await read_timed(names, held["output"])]
        latest = latest_by_id(revs)
        got = {jid: mood_answer(r) for jid, r in latest.items() if jid in expected}
        return revs if got == expected else []

    held_revs = await wait_for(held_exact, timeout_s=120, every_s=2)
    assert held_revs, "the held spec's answers never equalled the oracle's"
    firsts = [r for r in held_revs if r["revision"] == 1 and r["id"] in expected]
    assert not [r for r in firsts if r["mood"] is None and r["cause"] == "arrival"]
    assert any(r["cause"] == "hold-end" for r in firsts)

"""The mood join end to end on a real broker: worker processes, real topics, real changelogs."""

from __future__ import annotations

import asyncio
from typing import Any

from app.commands.sample_traffic import Record, sample_moods_and_events
from tests.faults import answers, diff, revisions_of
from tests.harness import Names, create_topic, latest_by_id, produce, read_all, wait_for
from tests.oracle import exact_mood_answer

START = 1_790_000_000_000


async def send_paced(names: Names, records: list[Record], pace_s: float) -> None:
    """Send in arrival order, one by one, so the worker sees that order (docs/concepts/event-time.md scenario)."""
    topic = {"mood": names.moods_topic, "event": names.events_topic}
    for kind, key, value in records:
        await produce(names, topic[kind], [(key, value)])
        if pace_s:
            await asyncio.sleep(pace_s)


async def converged(names: Names, expected: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    revs = await revisions_of(names)
    return revs if answers(revs) == expected else []


async def test_paced_out_of_order_emits_corrections_and_converges(names, worker_factory):
    records = sample_moods_and_events(seed=7, count=150, start_ms=START, late_ratio=0.3)
    expected = exact_mood_answer(records)
    worker_factory(names).wait_ready()

    await send_paced(names, records, pace_s=0.02)

    revs = await wait_for(lambda: converged(names, expected), timeout_s=90)
    assert revs, "the latest revision per join id never equalled the exact answer"
    corrections = [r for r in revs if r["revision"] > 1]
    assert any(r["cause"] == "late-dimension" for r in corrections), "late moods corrected nothing"
    for r in corrections:  # a correction says what it replaces, so consumers can retract
        assert r["previous_mood"] != r["mood"] or r["mood_event_time"] is not None
    by_id: dict[str, list[int]] = {}
    for r in revs:
        by_id.setdefault(r["id"], []).append(r["revision"])
    for numbers in by_id.values():  # no revision without a change: numbers are 1..n, no gaps
        assert sorted(set(numbers)) == list(range(1, max(numbers) + 1))


async def test_restart_mid_stream_recovers_state_and_converges(names, worker_factory):
    records = sample_moods_and_events(seed=11, count=160, start_ms=START, late_ratio=0.3)
    expected = exact_mood_answer(records)
    w = worker_factory(names, name="first").wait_ready()
    await send_paced(names, records[:80], pace_s=0.02)
    await asyncio.sleep(2)
    assert w.stop() == 0

    # records sent while the worker is down, then a fresh process recovers tables from changelogs
    await send_paced(names, records[80:120], pace_s=0)
    worker_factory(names, name="second").wait_ready()
    await send_paced(names, records[120:], pace_s=0.02)

    revs = await wait_for(lambda: converged(names, expected), timeout_s=90)
    assert revs, "after a restart: " + diff(answers(await revisions_of(names)), expected)
    # a join that revision 1 answered before the restart was corrected after it only through
    # recovered mood history: there must be corrections caused by records sent after restart
    assert any(r["revision"] > 1 for r in revs)


async def test_two_workers_share_partitions_and_converge(names, worker_factory):
    records = sample_moods_and_events(
        seed=5,
        count=160,
        start_ms=START,
        late_ratio=0.3,
        consultants=tuple(f"c{i}" for i in range(12)),
    )
    expected = exact_mood_answer(records)
    a = worker_factory(names, name="a").wait_ready()
    b = worker_factory(names, name="b").wait_ready()
    a.wait_ready(count=2, timeout_s=60)  # a rebalanced when b joined

    await send_paced(names, records, pace_s=0.02)

    revs = await wait_for(lambda: converged(names, expected), timeout_s=90)
    assert revs, "two workers did not converge on the exact answer"
    # both workers did join work: each owned some of the input partitions
    assert a.assigned(names.events_topic) and b.assigned(names.events_topic)


async def test_partition_count_mismatch_is_refused(names, worker_factory):
    await create_topic(names, names.moods_topic, 4)
    await create_topic(names, names.events_topic, 2)
    w = worker_factory(names)
    code = w.wait_exit(timeout_s=60)
    assert code != 0
    log = w.log()
    assert "refuses to start" in log
    assert f"{names.moods_topic} has 4" in log and f"{names.events_topic} has 2" in log


async def test_malformed_records_go_to_dead_letters_and_worker_goes_on(names, worker_factory):
    worker_factory(names).wait_ready()
    bad = [
        ("ann", b"not json"),
        ("ann", b"\xff\xfe\x00"),
        ("ann", b""),
        ("ann", {"name": "ann", "mood": "happy"}),
        ("ann", {"name": "ann", "mood": "happy", "event_time": "yesterday"}),
        ("ann", {"name": "ann", "mood": "happy", "event_time": -1}),
        ("bob", {"name": "ann", "mood": "happy", "event_time": START}),
        ("ann", [1, 2, 3]),
    ]
    await produce(names, names.moods_topic, bad)
    good_mood = {"name": "ann", "mood": "calm", "event_time": START}
    good_rec = {"consultant": "ann", "recommendation": "tea", "event_time": START + 5, "id": "g1"}
    await produce(names, names.moods_topic, [("ann", good_mood)])
    await produce(names, names.events_topic, [("ann", good_rec)])

    async def all_dead_letters() -> list[Any]:
        got = [v for _, v in await read_all(names, names.dead_letter_topic, idle_s=1)]
        return got if len(got) >= len(bad) else []

    dead = await wait_for(all_dead_letters, timeout_s=60)
    assert len(dead) == len(bad)
    for d in dead:
        assert d["topic"] == names.moods_topic and isinstance(d["offset"], int) and d["error"]
    reasons = " | ".join(d["error"] for d in dead)
    for phrase in (
        "not valid JSON",
        "not UTF-8",
        "empty value",
        "event_time: missing",
        "valid integer",
        "greater than or equal to 0",
        "disagrees",
        "JSON object",
    ):
        assert phrase in reasons
    assert any(d["value_encoding"] == "base64" for d in dead)

    async def joined() -> dict[str, Any]:
        latest = latest_by_id(await revisions_of(names))
        return latest if latest.get("g1", {}).get("mood") == "calm" else {}

    assert list(await wait_for(joined, timeout_s=30)) == ["g1"], "the good records after the bad"


async def test_records_older_than_the_horizon_go_to_late(names, worker_factory):
    worker_factory(names, retention_ms=60_000).wait_ready()
    await produce(
        names,
        names.events_topic,
        [
            ("ann", {"consultant": "ann", "recommendation": "x", "event_time": START, "id": "now"}),
            (
                "ann",
                {
                    "consultant": "ann",
                    "recommendation": "y",
                    "event_time": START - 61_000,
                    "id": "old",
                },
            ),
        ],
    )
    late = await wait_for(lambda: read_all(names, names.late_topic, idle_s=1), timeout_s=60)
    assert [v["record"]["id"] for _, v in late] == ["old"]
    assert late[0][1]["horizon"] == START - 60_000
    revs = await revisions_of(names)
    assert [r["id"] for r in revs] == ["now"]

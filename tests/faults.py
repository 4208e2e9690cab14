"""Shared by the fault tests: tracked sends, the exact answer, accounting of every input record.

The accounting rule (issue 8): every input record has exactly one fate, identified by its
(topic, partition, offset) — accepted (a join in the revision log, a mood in the mood history),
a dead letter, or a late record. Fate records may repeat after a crash (at-least-once); they
never disagree.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from app.downstream.mood_counts import MoodCounts, counts_of_answers, fold
from tests.harness import Names, Worker, bootstrap, encode, latest_by_id, read_all
from tests.oracle import Recommendation, exact_mood_answer, mood_answer

Position = tuple[str, int, int]  # (topic, partition, offset) of an input record


@dataclass(frozen=True)
class Sent:
    """One input record as the broker stored it."""

    kind: str  # "mood" | "event" | anything else for raw hostile records
    key: Any
    value: Any
    topic: str
    partition: int
    offset: int

    @property
    def position(self) -> Position:
        return (self.topic, self.partition, self.offset)


def topic_of(names: Names, kind: str) -> str:
    return {"mood": names.moods_topic, "event": names.events_topic}[kind]


async def send(
    names: Names,
    records: Iterable[tuple[str, Any, Any]],
    pace_s: float = 0.0,
    topics: dict[str, str] | None = None,
) -> list[Sent]:
    """Send (kind, key, value) in order with one producer; return where each one landed."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap(names), max_request_size=4 << 20, **names.client_auth()
    )
    await producer.start()
    out: list[Sent] = []
    try:
        for kind, key, value in records:
            topic = (topics or {}).get(kind) or topic_of(names, kind)
            meta = await producer.send_and_wait(topic, encode(value), key=encode(key))
            out.append(Sent(kind, key, value, topic, meta.partition, meta.offset))
            if pace_s:
                await asyncio.sleep(pace_s)
    finally:
        await producer.stop()
    return out


# --- answers (the exact ones: tests.oracle) ---------------------------------------------------


def answers(revisions: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """join id -> answer of its latest revision (the consumer rule of the revision log)."""
    return {jid: mood_answer(r) for jid, r in latest_by_id(revisions).items()}


def exact_counts(expected: dict[str, tuple[Any, ...]]) -> dict[str | None, int]:
    return counts_of_answers(a[4] for a in expected.values())


async def revisions_of(names: Names, idle_s: float = 1.5) -> list[dict[str, Any]]:
    return [v for _, v in await read_all(names, names.output_topic, idle_s=idle_s)]


async def wait_converged(
    names: Names, expected: dict[str, tuple[Any, ...]], timeout_s: float = 120.0
) -> list[dict[str, Any]]:
    """The whole revision log once its latest revisions equal ``expected`` (else the last read,
    so the assertion message can show the difference)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    revs: list[dict[str, Any]] = []
    while loop.time() < deadline:
        revs = await revisions_of(names)
        if answers(revs) == expected:
            return revs
        await asyncio.sleep(1)
    return revs


def diff(got: dict[str, Any], want: dict[str, Any], limit: int = 5) -> str:
    """A short description of how two answers differ (for assertion messages)."""
    missing = sorted(set(want) - set(got))[:limit]
    extra = sorted(set(got) - set(want))[:limit]
    wrong = [(k, got[k], want[k]) for k in sorted(set(got) & set(want)) if got[k] != want[k]]
    return f"missing {missing}; unexpected {extra}; wrong {wrong[:limit]} ({len(wrong)} in all)"


def check_revision_log(revs: list[dict[str, Any]]) -> None:
    """docs/concepts/revision-log.md: one revision number never carries two different answers,
    and each join's numbers are 1..n with no gap — after a crash too: a revision saved in state
    but not sent is re-emitted by the restarted worker even when a later one superseded it
    (app.logic.event_join.Join.unsent)."""
    by_number: dict[tuple[str, int], tuple[Any, ...]] = {}
    for r in revs:
        answer = (
            r["mood"],
            r["mood_event_time"],
            r["event_time"],
            r["recommendation"],
            r["previous_mood"],
        )
        seen = by_number.setdefault((r["id"], r["revision"]), answer)
        assert seen == answer, f"revision {r['revision']} of {r['id']} said {seen} and {answer}"
    numbers: dict[str, set[int]] = {}
    for jid, n in by_number:
        numbers.setdefault(jid, set()).add(n)
    gaps = {jid: sorted(ns) for jid, ns in numbers.items() if ns != set(range(1, max(ns) + 1))}
    assert not gaps, f"{len(gaps)} joins with revision gaps, e.g. {list(gaps.items())[:5]}"


def check_counts(revs: list[dict[str, Any]], expected: dict[str, tuple[Any, ...]]) -> MoodCounts:
    """The retracting consumer over the real log ends with the counts over the exact answer."""
    folded = fold(revs)
    assert folded.as_dict() == exact_counts(expected), (folded.as_dict(), exact_counts(expected))
    assert folded.mismatches == 0
    return folded


# --- accounting -------------------------------------------------------------------------------


@dataclass
class Fates:
    """Where each input record went, by position."""

    dead: dict[Position, list[dict[str, Any]]]
    late: dict[Position, list[dict[str, Any]]]

    @property
    def dead_reasons(self) -> dict[Position, str]:
        return {p: ds[0]["error"] for p, ds in self.dead.items()}


async def fates_of(names: Names, idle_s: float = 1.5) -> Fates:
    dead: dict[Position, list[dict[str, Any]]] = {}
    for _, d in await read_all(names, names.dead_letter_topic, idle_s=idle_s):
        dead.setdefault((d["topic"], d["partition"], d["offset"]), []).append(d)
    late: dict[Position, list[dict[str, Any]]] = {}
    for _, v in await read_all(names, names.late_topic, idle_s=idle_s):
        late.setdefault((v["topic"], v["partition"], v["offset"]), []).append(v)
    return Fates(dead, late)


def check_accounting(
    sent: list[Sent],
    fates: Fates,
    revs: list[dict[str, Any]],
    moods_seen: dict[str, set[tuple[int, str]]],
    expect_dead: set[Position],
    expect_late: set[Position],
) -> None:
    """records in = accepted + dead letters + late, record by record.

    ``moods_seen``: consultant -> {(event_time, mood)} as the workers' mood history shows it.
    """
    positions = {s.position for s in sent}
    assert len(positions) == len(sent)
    assert set(fates.dead) <= positions, "dead letters for records nobody sent"
    assert set(fates.late) <= positions, "late records for records nobody sent"
    assert not set(fates.dead) & set(fates.late), "a record both dead and late"
    assert set(fates.dead) == expect_dead, diff_sets(set(fates.dead), expect_dead)
    assert set(fates.late) == expect_late, diff_sets(set(fates.late), expect_late)
    for copies in (*fates.dead.values(), *fates.late.values()):
        assert all(c == copies[0] for c in copies), "a repeated fate record that disagrees"
    joined = {r["id"] for r in revs}
    accepted = [s for s in sent if s.position not in expect_dead | expect_late]
    for s in accepted:
        if s.kind == "event":
            jid = Recommendation(
                s.value["consultant"],
                s.value["recommendation"],
                s.value["event_time"],
                s.value.get("id"),
            ).join_id
            assert jid in joined, f"accepted recommendation {s.value} has no revision"
        else:
            point = (s.value["event_time"], s.value["mood"])
            assert point in moods_seen.get(s.value["name"], set()), (
                f"accepted mood {s.value} is not in the mood history"
            )
    assert len(accepted) + len(fates.dead) + len(fates.late) == len(sent)


def diff_sets(got: set[Any], want: set[Any]) -> str:
    return f"unexpected {sorted(got - want)[:5]}, missing {sorted(want - got)[:5]}"


def mood_history(workers: list[Worker], names: Iterable[str]) -> dict[str, set[tuple[int, str]]]:
    """consultant -> {(event_time, mood)} from the routed /moods/ view (any worker answers)."""
    out: dict[str, set[tuple[int, str]]] = {}
    for name in set(names):
        for w in workers:
            status, body = w.get(f"/moods/{name}/")
            if status == 200:
                out[name] = {(m["event_time"], m["mood"]) for m in body["moods"]}
                break
    return out


# --- worker metrics ---------------------------------------------------------------------------


def worker_metrics(w: Worker) -> dict[str, dict[str, float]]:
    """Counters of one worker from GET /metrics: metric name -> {label value: value}, where the
    label is the one after ``join`` (topic, cause ...) and values are summed over the joins."""
    status, body = w.get("/metrics")
    assert status == 200, body
    text = body.decode() if isinstance(body, bytes) else str(body)
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            label = next(iter(v for k, v in s.labels.items() if k != "join"), "")
            by_label = out.setdefault(s.name, {})
            by_label[label] = by_label.get(label, 0.0) + s.value
    return out


def count_by_topic(
    sent: Iterable[Sent],
    positions: Iterable[Position] | None = None,
) -> Counter[str]:
    keep = None if positions is None else set(positions)
    return Counter(s.topic for s in sent if keep is None or s.position in keep)


async def diagnose(names: Names, workers: list[Worker]) -> str:
    """Committed offsets of the app's group vs the records in each input partition, and what
    each worker says it consumed: printed when a fault test fails."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    lines = []
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(names),
        group_id=names.app_id,
        enable_auto_commit=False,
        **names.client_auth(),
    )
    await consumer.start()
    try:
        for topic in (names.moods_topic, names.events_topic):
            counts: Counter[Any] = Counter()
            for key, _ in await read_all(names, topic, idle_s=1):
                counts[key] += 1
            for p in sorted(consumer.partitions_for_topic(topic) or ()):
                committed = await consumer.committed(TopicPartition(topic, p))
                lines.append(f"{topic}[{p}] committed={committed}")
            lines.append(f"{topic} records per key: {dict(counts)}")
    finally:
        await consumer.stop()
    for w in workers:
        status, body = w.get("/stats/")
        got = body.get("records_in") if status == 200 else body
        lines.append(f"{w.name}: HTTP {status} records_in={got}")
    return "\n".join(lines)


async def settled_mood_history(
    workers: list[Worker],
    sent: list[Sent],
    exclude: set[Position] = frozenset(),  # type: ignore[assignment]
    timeout_s: float = 60.0,
) -> dict[str, set[tuple[int, str]]]:
    """The mood history once it shows every mood of ``sent`` not in ``exclude`` (converged
    answers do not mean every record was consumed: a mood that changes no join shows nowhere
    else); after ``timeout_s`` the last reading, for the accounting check to report."""
    want = {
        (s.value["name"], s.value["event_time"], s.value["mood"])
        for s in sent
        if s.kind == "mood" and s.position not in exclude
    }
    names = {n for n, _, _ in want}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        seen = await asyncio.to_thread(mood_history, workers, names)
        if all((t, m) in seen.get(n, ()) for n, t, m in want) or loop.time() > deadline:
            return seen
        await asyncio.sleep(1)


# --- faults mid-stream: how far a worker got, and the checks once it is over ---------------


def processed(w: Worker) -> float:
    """Input records this worker process has consumed so far (0 while it is not answering)."""
    status, _ = w.get("/metrics", timeout_s=2)
    if status != 200:
        return 0
    return sum(worker_metrics(w).get("etj_records_in_total", {}).values())


def wait_processed(w: Worker, at_least: int, timeout_s: float = 90) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        n = processed(w)
        if n >= at_least:
            return n
        time.sleep(0.3)
    raise TimeoutError(f"worker {w.name} processed {processed(w)} < {at_least} records")


async def uncommitted(
    names: Names, sent: Iterable[Sent], timeout_s: float = 20.0, poll_s: float = 1.0
) -> dict[tuple[str, int], tuple[int | None, int]]:
    """Input partitions whose committed offset is still short of the records ``sent`` to them
    after ``timeout_s`` (``(topic, partition) -> (committed, end)``; empty: all committed).
    The end of each partition is taken from the positions the sends got back, not from the
    broker: tansu under-reports end offsets of batched topics.

    A worker that answers everything but never commits a partition handles it all again after
    a restart, and each join keeps every revision it superseded since that commit
    (app.logic.event_join.Join.unsent) until a row outgrows the producer's request limit: the
    CI failure of 2026-11-25, three mood partitions never committed past the first worker's
    stop."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    want: dict[tuple[str, int], int] = {}
    for s in sent:
        want[(s.topic, s.partition)] = max(want.get((s.topic, s.partition), 0), s.offset + 1)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(names),
        group_id=names.app_id,
        enable_auto_commit=False,
        **names.client_auth(),
    )
    await consumer.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while True:
            short = {}
            for (topic, p), end in sorted(want.items()):
                committed = await consumer.committed(TopicPartition(topic, p))
                if committed is None or committed < end:
                    short[(topic, p)] = (committed, end)
            if not short or loop.time() > deadline:
                return short
            await asyncio.sleep(poll_s)
    finally:
        await consumer.stop()


async def settle_and_check(names, records, sent, workers, timeout_s=150):
    expected = exact_mood_answer(records)
    revs = await wait_converged(names, expected, timeout_s=timeout_s)
    if answers(revs) != expected:
        print(await diagnose(names, workers))
    assert answers(revs) == expected, diff(answers(revs), expected)
    short = await uncommitted(names, sent)
    assert not short, "input partitions left uncommitted (committed, end): " + ", ".join(
        f"{t}[{p}] {c}" for (t, p), c in short.items()
    )
    check_revision_log(revs)
    check_counts(revs, expected)
    fates = await fates_of(names)
    check_accounting(
        sent,
        fates,
        revs,
        await settled_mood_history(workers, sent),
        expect_dead=set(),
        expect_late=set(),
    )
    return revs

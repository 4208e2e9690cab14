"""The chaos run's verdict, once traffic stopped and the workers converged: counted, not
asserted, so one figure per property comes out of a long run whatever else went wrong.

The exact answers come from the oracles the broker tests use, :mod:`tests.oracle`'s answers
over records as sent: :func:`~tests.oracle.exact_mood_answer`,
:func:`~tests.oracle.exact_car_answer`, :func:`~tests.oracle.exact_movie_answer`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from app.logic.car_join import CarPollution, newest_per_car
from tests.chaos.traffic import RETENTION_MS
from tests.faults import (
    Sent,
    answers,
    check_counts,
    check_revision_log,
    exact_counts,
    fates_of,
    settled_mood_history,
    uncommitted,
)
from tests.harness import Names, Worker, bootstrap
from tests.oracle import (
    Recommendation,
    exact_car_answer,
    exact_mood_answer,
    exact_movie_answer,
    movie_answers,
)

MOOD_KINDS, CAR_KINDS, MOVIE_KINDS = ("mood", "event"), ("car", "zone"), ("movie", "rating")


def expected(sent: list[Sent]) -> dict[str, Any]:
    """Exact answers over every record sent (duplicates change nothing)."""

    def of(kinds: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
        return [(s.kind, s.key, s.value) for s in sent if s.kind in kinds]

    return {
        "mood": exact_mood_answer(of(MOOD_KINDS)),
        "car": exact_car_answer(of(CAR_KINDS)),
        "movies": exact_movie_answer(of(MOVIE_KINDS)),
    }


class Outputs:
    """Every output record of the three joins, read from the start of their topics by one
    consumer that goes on where it stopped: the broker serves each record once, not once per
    look (reading hundreds of thousands of records again every few seconds kept tansu busy)."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.topics = {
            "mood": names.output_topic,
            "car": names.car_pollution_topic,
            "movies": names.rated_movies_topic,
        }
        self.got: dict[str, list[Any]] = {join: [] for join in self.topics}
        self.consumer: AIOKafkaConsumer | None = None

    async def read(self, idle_s: float = 2.0, timeout_s: float = 900) -> dict[str, Any]:
        """Read until ``idle_s`` pass without a record; every record so far, per join."""
        if self.consumer is None:
            self.consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap(self.names),
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_partition_fetch_bytes=8 << 20,
            )
            await self.consumer.start()
            self.consumer.assign(
                [
                    TopicPartition(t, p)
                    for t in self.topics.values()
                    for p in self.consumer.partitions_for_topic(t) or ()
                ]
            )
            await self.consumer.seek_to_beginning()
        join_of = {t: j for j, t in self.topics.items()}
        deadline, last = time.monotonic() + timeout_s, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            for tp, msgs in (await self.consumer.getmany(timeout_ms=300)).items():
                join = join_of[tp.topic]
                for m in msgs:
                    v = orjson.loads(m.value)
                    self.got[join].append(CarPollution.from_wire(v) if join == "car" else v)
                last = time.monotonic()
        return self.got

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()


def latest(outs: dict[str, Any]) -> dict[str, Any]:
    """What each join's consumer rule keeps."""
    return {
        "mood": answers(outs["mood"]),
        "car": newest_per_car(outs["car"]),
        "movies": movie_answers(outs["movies"]),
    }


async def wait_converged(
    names: Names,
    want: dict[str, Any],
    timeout_s: float,
    slow: Callable[[], Any] | None = None,
    slow_s: float = 120,
) -> tuple[dict[str, Any], float]:
    """The outputs once every join's latest answers equal ``want`` (else the last read), and
    the seconds it took; ``slow()`` is called once if that takes more than ``slow_s``. The
    wait's limit counts from the end of the first read: after 10 minutes of traffic, reading
    the whole log once took the broker 605 s (hundreds of thousands of one-record batches), the
    whole of the settling time, and the run was judged before it had looked."""
    t0 = time.monotonic()
    reader = Outputs(names)
    try:
        outs = await reader.read()
        read_s = time.monotonic() - t0
        while True:
            got = latest(outs)
            exact = [join for join in want if got[join] == want[join]]
            off = {join: differing(got[join], want[join]) for join in want if join not in exact}
            print(
                f"[chaos] settling {time.monotonic() - t0:5.0f} s: exact {exact}"
                + "".join(f", {j} missing {m} wrong {w}" for j, (m, w) in off.items()),
                flush=True,
            )
            waited = time.monotonic() - t0 - read_s
            if len(exact) == len(want) or waited > timeout_s:
                return outs, time.monotonic() - t0
            if slow is not None and waited > slow_s:
                for join in off:
                    print(
                        f"[chaos] {join} differs: "
                        f"{orjson.dumps(differences(got[join], want[join])).decode()}",
                        flush=True,
                    )
                await asyncio.to_thread(slow)
                slow = None
            await asyncio.sleep(3)
            outs = await reader.read()
    finally:
        await reader.close()


#: how many of each kind of difference a run reports in full (``examples``), to look into
EXAMPLES = 8


def differences(got: dict[Any, Any], want: dict[Any, Any]) -> list[dict[str, Any]]:
    """The first :data:`EXAMPLES` ids answered otherwise than the exact answer: id, got, want."""
    none = object()
    ids = sorted(
        (k for k in set(got) | set(want) if got.get(k, none) != want.get(k, none)), key=str
    )
    return [
        {"id": str(k), "got": repr(got.get(k)), "want": repr(want.get(k))} for k in ids[:EXAMPLES]
    ]


def differing(got: dict[Any, Any], want: dict[Any, Any]) -> tuple[int, int]:
    """(missing, wrong): ids the exact answer has and ``got`` lacks; ids answered otherwise
    (or answered though the exact answer has no such id)."""
    missing = len(set(want) - set(got))
    wrong = len(set(got) - set(want)) + sum(got[k] != want[k] for k in set(got) & set(want))
    return missing, wrong


def gaps_and_clashes(revs: list[dict[str, Any]], answer: Any) -> tuple[dict[str, list[int]], int]:
    """Join ids whose revision numbers are not 1..n (with the numbers they have); (id, number)
    pairs carrying two answers."""
    by_number: dict[tuple[str, int], Any] = {}
    clashes = 0
    for r in revs:
        a = answer(r)
        seen = by_number.setdefault((r["id"], r["revision"]), a)
        clashes += seen != a
    numbers: dict[str, set[int]] = {}
    for jid, n in by_number:
        numbers.setdefault(jid, set()).add(n)
    return {j: sorted(ns) for j, ns in numbers.items() if ns != set(range(1, max(ns) + 1))}, clashes


def mood_wire_answer(r: dict[str, Any]) -> tuple[Any, ...]:
    return (
        r["mood"],
        r["mood_event_time"],
        r["event_time"],
        r["recommendation"],
        r["previous_mood"],
    )


def movie_wire_answer(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["title"], r["movie_event_time"], r["event_time"], r["previous_title"])


async def unconsumed(names: Names, sent: list[Sent], timeout_s: float = 60) -> int:
    """Records past the group's committed offset of their partition (0 once every one was
    handled and committed; :func:`tests.faults.uncommitted`)."""
    short = await uncommitted(names, sent, timeout_s=timeout_s, poll_s=2)
    return sum(
        1
        for s in sent
        if (s.topic, s.partition) in short and s.offset >= (short[(s.topic, s.partition)][0] or 0)
    )


def unpurged_moods(sent: list[Sent]) -> list[Sent]:
    """The moods the mood history must still show: those at or after their partition's
    retention horizon (stream time, the newest event time of the partition's moods and
    recommendations, minus the retention). Older ones may have been purged (the last one
    before the horizon stays): that they were handled shows in the committed offsets."""
    stream_time: dict[int, int] = {}
    for s in sent:
        if s.kind in MOOD_KINDS:
            stream_time[s.partition] = max(stream_time.get(s.partition, 0), s.value["event_time"])
    return [
        s
        for s in sent
        if s.kind == "mood" and s.value["event_time"] >= stream_time[s.partition] - RETENTION_MS
    ]


def car_web_view_wrong(
    workers: list[Worker], want: dict[int, CarPollution], patience_s: float = 60
) -> int:
    """Cars whose ``GET /cars/{id}/`` (asked of any worker: it is routed) is not the exact car
    view. A view answers 503 while a rebalance moves its partition, so a car is asked again
    every second, for ``patience_s`` in all (then once each: a stuck group must not make the
    check last an hour)."""
    wrong = 0
    deadline = time.monotonic() + patience_s
    for car_id, exact in want.items():
        wire = exact.to_wire()
        attempt = 0
        while True:
            status, body = workers[(car_id + attempt) % len(workers)].get(
                f"/cars/{car_id}/", timeout_s=5
            )
            if status == 200 and {k: body.get(k) for k in wire} == wire:
                break
            attempt += 1
            if time.monotonic() > deadline or attempt >= 5:
                wrong += 1
                break
            time.sleep(1)
    return wrong


async def verdict(
    names: Names,
    workers: list[Worker],
    sent: list[Sent],
    want: dict[str, Any],
    outs: dict[str, Any],
) -> dict[str, Any]:
    """Every figure of the run's end state (see tests.chaos)."""
    got = latest(outs)
    missing, wrong, detail = 0, 0, {}
    examples: dict[str, Any] = {}
    for join in ("mood", "car", "movies"):
        m, w = differing(got[join], want[join])
        missing, wrong = missing + m, wrong + w
        detail[f"{join}_missing"], detail[f"{join}_wrong"] = m, w
        if m or w:
            examples[join] = differences(got[join], want[join])
    detail["car_web_view_wrong"] = await asyncio.to_thread(car_web_view_wrong, workers, want["car"])
    wrong += detail["car_web_view_wrong"]
    try:  # the retracting consumer's counts (the mood join's aggregate)
        check_counts(outs["mood"], want["mood"])
        detail["mood_counts_wrong"] = 0
    except AssertionError:
        folded = exact_counts(want["mood"])
        from app.downstream.mood_counts import fold

        have = fold(outs["mood"]).as_dict()
        detail["mood_counts_wrong"] = (
            sum(have.get(k) != folded.get(k) for k in set(have) | set(folded)) or 1
        )
    wrong += detail["mood_counts_wrong"]

    mood_gaps, mood_clashes = gaps_and_clashes(outs["mood"], mood_wire_answer)
    movie_gaps, movie_clashes = gaps_and_clashes(outs["movies"], movie_wire_answer)
    wrong += mood_clashes + movie_clashes
    for join, gaps in (("mood_gaps", mood_gaps), ("movie_gaps", movie_gaps)):
        if gaps:
            examples[join] = [
                {"id": j, "revisions": ns} for j, ns in sorted(gaps.items())[:EXAMPLES]
            ]
    try:
        check_revision_log(outs["mood"])
        detail["check_revision_log"] = "ok"
    except AssertionError as exc:
        detail["check_revision_log"] = str(exc)[:300]

    # every input record has a fate: accepted (seen in the join), a dead letter, or late
    fates = await fates_of(names)
    elsewhere = set(fates.dead) | set(fates.late)
    joined = {r["id"] for r in outs["mood"]} | {r["id"] for r in outs["movies"]}
    moods = unpurged_moods(sent)
    in_history = {m.position for m in moods}
    history = await settled_mood_history(workers, moods, exclude=elsewhere, timeout_s=120)
    fateless: list[Sent] = []
    for s in sent:
        if s.position in elsewhere:
            continue
        if s.kind == "event":
            lost = (
                Recommendation(
                    s.value["consultant"],
                    s.value["recommendation"],
                    s.value["event_time"],
                    s.value.get("id"),
                ).join_id
                not in joined
            )
        elif s.kind == "rating":
            lost = s.value["id"] not in joined
        elif s.kind == "mood" and s.position in in_history:
            lost = (s.value["event_time"], s.value["mood"]) not in history.get(s.value["name"], ())
        else:
            lost = False
        if lost:
            fateless.append(s)
    no_fate = len(fateless)
    detail["no_fate"] = no_fate
    if fateless:
        examples["no_fate"] = [
            {"kind": s.kind, "at": list(s.position), "key": repr(s.key), "value": s.value}
            for s in fateless[:EXAMPLES]
        ]
    detail["examples"] = examples
    # car arrivals, zone readings and movie versions show in no per-record output: the group
    # must have handled (and committed) every one of them
    detail["unconsumed"] = await unconsumed(names, sent)
    return {
        "chaos_lost": missing + no_fate + detail["unconsumed"],
        "chaos_wrong": wrong,
        "chaos_gaps": len(mood_gaps) + len(movie_gaps),
        "chaos_dead_letters": len(fates.dead),
        "chaos_late": len(fates.late),
        "mood_gaps": len(mood_gaps),
        "movie_gaps": len(movie_gaps),
        "revision_clashes": mood_clashes + movie_clashes,
        **detail,
    }

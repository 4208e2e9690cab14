"""The generic engine driven through its loop (no broker): the movies spec's hold,
release, window and purge, what it leaves in its tables, and randomised arrival orders through
the real agents of both specs.
"""

from __future__ import annotations

import json
import random
from typing import Any

from app import metrics as jm
from app.inputs.records import parse
from app.joins.joins_table import stored_versions
from app.joins.keys import BUCKET_MS, expiry_key, id_key, join_key
from app.settings import Settings
from tests.oracle import exact_answer

DAY = 86_400_000
T = 1_790_000_000_000
S = Settings()


def movie(movie_id: str, title: str, t: int) -> dict[str, Any]:
    return {"movie_id": movie_id, "title": title, "event_time": t}


def rating(
    rid: str,
    movie_id: str,
    t: int,
    user: str = "u1",
    stars: float = 4.0,
) -> dict[str, Any]:
    return {"id": rid, "movie_id": movie_id, "user_id": user, "rating": stars, "event_time": t}


def count(metric: Any, *labels: str) -> float:
    return metric.labels(*labels)._value.get()  # type: ignore[no-any-return]


async def test_a_rating_is_held_until_its_movie_arrives_then_released(join_harness):
    held0, released0 = count(jm.held, "movies"), count(jm.released, "movies")
    async with join_harness("movies") as h:
        # 1. the rating arrives first: held, nothing emitted, one row + its expiry row in state
        await h.event(rating("r1", "m1", T))
        assert h.outputs() == []
        assert count(jm.held, "movies") == held0 + 1
        assert h.engine.tables.joins[join_key("m1", T, "r1")][-3:-1] == [0, "arrival"]
        assert h.engine.tables.joins[expiry_key(0, T, "m1")] == 1  # m1 has joins near T
        assert h.engine.tables.joins[id_key("m1", "r1")] == T
        # 2. the movie arrives, stamped after the rating: the earliest version, released now
        await h.dimension(movie("m1", "Alien", T + 5), offset=7)
        assert h.outputs() == [
            {
                "id": "r1",
                "movie_id": "m1",
                "user_id": "u1",
                "rating": 4.0,
                "event_time": T,
                "title": "Alien",
                "movie_event_time": T + 5,
                "revision": 1,
                "previous_title": None,
                "cause": "late-dimension",  # lineage: the movie record released it
                "partition": 0,  # the input partition whose finality promise covers it
                "source": {"topic": h.spec.dimension.topic, "partition": 0, "offset": 7},
            }
        ]
        assert count(jm.released, "movies") == released0 + 1
        # 3. an older version arrives late: the rating now joins it (greatest <= its time)
        await h.dimension(movie("m1", "Alien (1979)", T - 10 * DAY))
        last = h.outputs()[-1]
        assert (last["title"], last["revision"], last["previous_title"]) == (
            "Alien (1979)",
            2,
            "Alien",
        )
        assert stored_versions(h.engine.tables.joins, h.engine.tables.history, "m1", 0) == [
            [T - 10 * DAY, "Alien (1979)"],
            [T + 5, "Alien"],
        ]


async def test_ratings_older_than_the_window_go_to_late_old_movies_do_not(join_harness):
    async with join_harness("movies") as h:
        await h.event(rating("now", "m1", T))
        await h.event(rating("old", "m1", T - 30 * DAY - 1))
        [late] = h.outputs(S.late_topic)
        assert late["record"]["id"] == "old" and late["horizon"] == T - 30 * DAY
        # a catalogue version stamped a year ago is applied, and releases the held rating
        await h.dimension(movie("m1", "Up", T - 365 * DAY))
        assert [(o["id"], o["title"]) for o in h.outputs()] == [("now", "Up")]
        assert len(h.outputs(S.late_topic)) == 1


async def test_a_rating_whose_movie_never_arrives_is_purged_and_counted(join_harness):
    unmatched0 = count(jm.unmatched, "movies")
    async with join_harness("movies") as h:
        await h.event(rating("lonely", "m9", T), partition=2)
        await h.event(rating("fresh", "m9", T + 30 * DAY + 1), partition=2)  # moves the clock
        await h.tick(partition=2)
        assert count(jm.unmatched, "movies") == unmatched0 + 1
        assert h.engine.tables.joins.get(join_key("m9", T, "lonely")) is None
        assert h.engine.tables.joins.get(id_key("m9", "lonely")) is None
        # the key's row of T's expiry bucket stays until the whole bucket is behind the horizon
        assert h.engine.tables.joins.get(expiry_key(2, T, "m9")) == 1
        assert h.engine.tables.joins.get(join_key("m9", T + 30 * DAY + 1, "fresh")) is not None
        await h.dimension(movie("m9", "Heat", T), partition=2)
        assert [o["id"] for o in h.outputs()] == ["fresh"]  # never "lonely"
        await h.event(rating("later", "m9", T + 30 * DAY + BUCKET_MS), partition=2)
        await h.tick(partition=2)
        assert h.engine.tables.joins.get(expiry_key(2, T, "m9")) is None


async def test_a_redelivered_record_re_emits_what_it_touched(join_harness):
    async with join_harness("movies") as h:
        await h.dimension(movie("m1", "Up", T))
        await h.event(rating("r1", "m1", T + 1))
        await h.event(rating("r2", "m1", T + 2))
        first = h.outputs()
        # delivered (acked by this process): the same records again re-emit nothing
        await h.event(rating("r1", "m1", T + 1))
        await h.dimension(movie("m1", "Up", T))
        assert h.outputs() == first
        # as after a crash between the state write and the send (a restarted worker knows
        # nothing acked): the same records again
        h.loop.drop_waiting()
        await h.event(rating("r1", "m1", T + 1))
        await h.dimension(movie("m1", "Up", T))
        again = h.outputs()[len(first) :]
        assert again == [first[0], first[0], first[1]]  # same revisions, nothing new


# ---- randomised arrival orders through the real agents of both specs --------------------------


def partition_of(key: str) -> int:
    return sum(key.encode()) % 4


async def converge(h: Any, records: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    h.clear()
    for side, value in records:
        key = value[h.spec.events.key if side == "event" else h.spec.dimension.key]
        await (h.event if side == "event" else h.dimension)(value, partition_of(key))
    latest: dict[str, Any] = {}
    for out in h.outputs():
        if out["id"] not in latest or out["revision"] >= latest[out["id"]]["revision"]:
            latest[out["id"]] = out
    return latest


def expected(spec: Any, records: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    versions, events = [], []
    for side, value in records:
        model = spec.events.model if side == "event" else spec.dimension.model
        key = value[spec.events.key if side == "event" else spec.dimension.key]
        rec = parse(model, key.encode(), json.dumps(value).encode())
        if side == "event":
            events.append(spec.event_of(rec))
        else:
            versions.append((key, spec.version_of(rec)))
    return exact_answer(spec.rules, versions, events)


def as_results(spec: Any, latest: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for jid, o in latest.items():
        key = o[spec.events.key]
        payload = tuple(o[f] for f in spec.payload_fields)
        answer = tuple(o[f] for f in spec.dimension.copy)
        out[jid] = (
            jid,
            key,
            o[spec.events.time],
            payload,
            None if o[spec.time_as] is None else answer,
            o[spec.time_as],
        )
    return out


def random_movies(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    movies = ["m1", "m2", "m3", "m4"]
    recs = [
        (
            "dim",
            movie(
                rng.choice(movies), rng.choice(["A", "B", "C"]), T + rng.randrange(0, 40) * DAY // 4
            ),
        )
        for _ in range(rng.randrange(12))
    ]
    recs += [
        (
            "event",
            rating(
                f"r{i}",
                rng.choice(movies),
                T + rng.randrange(0, 40) * DAY // 4,
                rng.choice(["u1", "u2"]),
                rng.choice([1.0, 2.5, 5.0]),
            ),
        )
        for i in range(rng.randrange(1, 25))
    ]
    recs += rng.sample(recs, k=min(3, len(recs)))  # duplicates
    rng.shuffle(recs)
    return recs


def random_moods(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    names = ["ann", "bob", "cy", "dee"]
    recs = [
        (
            "dim",
            {
                "name": rng.choice(names),
                "mood": rng.choice(["happy", "sad", "calm"]),
                "event_time": T + rng.randrange(40) * 1000,
            },
        )
        for _ in range(rng.randrange(12))
    ]
    for i in range(rng.randrange(1, 25)):
        rec = {
            "consultant": rng.choice(names),
            "recommendation": rng.choice(["tea", "cake"]),
            "event_time": T + rng.randrange(40) * 1000,
        }
        if rng.random() < 0.5:
            rec["id"] = f"j{i}"
        recs.append(("event", rec))
    recs += rng.sample(recs, k=min(3, len(recs)))
    rng.shuffle(recs)
    return recs


async def test_random_orders_converge_on_the_exact_answer_for_both_specs(join_harness):
    rng = random.Random(20261123)
    for name, make in (("movies", random_movies), ("moods", random_moods)):
        async with join_harness(name) as h:
            for _ in range(25):
                records = make(rng)
                latest = await converge(h, records)
                assert as_results(h.spec, latest) == expected(h.spec, records), records
                if name == "movies":
                    assert all(o["title"] is not None for o in h.outputs())

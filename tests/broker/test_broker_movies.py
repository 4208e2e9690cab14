"""The movies x ratings join spec end to end on a real broker: worker processes, real topics."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.harness import Names, produce, read_all, wait_for
from tests.oracle import exact_movie_answer, movie_answers

DAY = 86_400_000
T = 1_790_000_000_000


def movie(movie_id: str, title: str, t: int) -> tuple[str, str, dict[str, Any]]:
    return ("movie", movie_id, {"movie_id": movie_id, "title": title, "event_time": t})


def rating(
    rid: str,
    movie_id: str,
    t: int,
    user: str = "u1",
    stars: float = 4.0,
) -> tuple[str, str, dict[str, Any]]:
    return (
        "rating",
        movie_id,
        {"id": rid, "movie_id": movie_id, "user_id": user, "rating": stars, "event_time": t},
    )


async def send(
    names: Names, records: list[tuple[str, str, dict[str, Any]]], pace_s: float = 0.05
) -> None:
    topic = {"movie": names.movies_topic, "rating": names.ratings_topic}
    for kind, key, value in records:
        await produce(names, topic[kind], [(key, value)])
        await asyncio.sleep(pace_s)


async def revisions_of(names: Names) -> list[dict[str, Any]]:
    return [v for _, v in await read_all(names, names.rated_movies_topic, idle_s=1.5)]


async def converged(names: Names, expected: dict[str, Any]) -> list[dict[str, Any]]:
    revs = await revisions_of(names)
    return revs if movie_answers(revs) == expected else []


async def counters(w: Any, **at_least: int) -> dict[str, Any]:
    """The movies join as ``GET /joins/`` lists it, once its counters reach ``at_least``."""
    status, body = w.get("/joins/")
    films = {j["name"]: j for j in body["joins"]}["movies"] if status == 200 else {}
    got = films.get("counters", {})
    return films if all(got.get(k, 0) >= n for k, n in at_least.items()) else {}


async def test_ratings_wait_for_their_movie_are_corrected_windowed_and_counted(
    names, worker_factory
):
    w = worker_factory(names).wait_ready()
    joined = [
        rating("r1", "m1", T),  # 1. held: m1 unknown
        rating("r2", "m2", T + 3_600_000),  # held: m2 unknown
        movie("m1", "Alien", T + 7_200_000),  # 2. releases r1 (earliest version)
        rating("r3", "m1", T + 3 * 3_600_000),  # 3. joins at once
        movie("m1", "Alien (1979)", T - DAY),  # 4. older version: r1 and r3 corrected
        movie("m2", "Up", T - 400 * DAY),  # 5. an old catalogue version: not late, releases r2
        rating("r4", "m-never", T),  # 6. its movie never arrives
    ]
    await send(names, joined[:2])
    # the topics are read independently: see both ratings held before their movies are sent
    assert await wait_for(lambda: counters(w, held=2), timeout_s=60), "ratings not held"
    await send(names, joined[2:])
    expected = exact_movie_answer(joined)
    assert set(expected) == {"r1", "r2", "r3"}
    revs = await wait_for(lambda: converged(names, expected), timeout_s=90)
    assert revs, f"never converged on {expected}"
    assert all(r["title"] is not None for r in revs), "inner mode emitted a null title"
    assert "r4" not in {r["id"] for r in revs}
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in revs:
        by_id.setdefault(r["id"], []).append(r)
    r1 = sorted(by_id["r1"], key=lambda r: r["revision"])
    assert [(r["revision"], r["title"], r["previous_title"], r["cause"]) for r in r1][:2] == [
        (1, "Alien", None, "late-dimension"),
        (2, "Alien (1979)", "Alien", "late-dimension"),
    ]

    # 7. the window: 31 days later on m1's and m-never's partitions, an old rating is late, and
    #    the held rating of the movie that never came is dropped at the next revisit, counted
    await send(
        names,
        [
            rating("r5", "m1", T + 31 * DAY),
            rating("r6", "m1", T + DAY - 1),
            rating("r7", "m-never", T + 31 * DAY),
        ],
    )

    async def late_r6() -> list[Any]:
        return [
            v
            for _, v in await read_all(names, names.late_topic, idle_s=1)
            if v["record"]["id"] == "r6"
        ]

    [late] = await wait_for(late_r6, timeout_s=60)
    assert late["horizon"] == T + DAY and late["topic"] == names.ratings_topic

    films = await wait_for(lambda: counters(w, held=4, unmatched=1), timeout_s=60)
    # r1, r2, r4, r7 were held (r3 too if it overtook its movie: the topics are read apart)
    assert films and films["counters"]["unmatched"] == 1 and films["counters"]["held"] >= 4
    assert films["events"]["topic"] == names.ratings_topic and films["mode"] == "inner"
    assert "r6" not in {r["id"] for r in await revisions_of(names)}


async def test_a_held_rating_survives_a_crash_and_is_released_after_it(names, worker_factory):
    first = worker_factory(names, name="first").wait_ready()
    await send(names, [rating("h1", "m5", T), rating("h2", "m6", T)])
    await asyncio.sleep(3)  # held in state, changelog written
    first.kill()

    worker_factory(names, name="second").wait_ready()
    records = [
        rating("h1", "m5", T),
        rating("h2", "m6", T),
        movie("m5", "Heat", T - DAY),
        movie("m6", "Ran", T + DAY),
    ]
    await send(names, records[2:])
    revs = await wait_for(lambda: converged(names, exact_movie_answer(records)), timeout_s=90)
    assert revs, "a held rating was lost across the crash"
    assert {(r["id"], r["title"]) for r in revs} == {("h1", "Heat"), ("h2", "Ran")}

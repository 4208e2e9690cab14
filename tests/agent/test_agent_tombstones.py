"""Tombstones through the engine's loop (no broker): on a dimension topic one ends the key's
version at its Kafka timestamp (corrections for the joins it ends; events after it answer null,
or are held in ``inner`` mode), on an events topic it is a dead letter that says it is no
delete; randomised arrival orders with tombstones converge on the oracle.
"""

from __future__ import annotations

import random
from typing import Any

from app import metrics as jm
from app.faust_app import settings
from app.inputs.tombstones import NOT_A_DELETE
from app.joins.keys import version_key
from app.web.join_readers import EventTimeReader
from tests.agent.test_agent_joins import (
    T,
    as_results,
    count,
    expected,
    movie,
    partition_of,
    random_moods,
    rating,
)
from tests.oracle import exact_answer


def mood(name: str, m: str, t: int) -> dict[str, Any]:
    return {"name": name, "mood": m, "event_time": t}


def rec(name: str, what: str, t: int, jid: str) -> dict[str, Any]:
    return {"consultant": name, "recommendation": what, "event_time": t, "id": jid}


async def test_a_tombstone_ends_the_version_corrects_what_it_ends_and_later_events_answer_null(
    join_harness,
):
    ended0 = count(jm.tombstones, "moods", settings.moods_topic)
    async with join_harness("moods") as h:
        # 1. ann is happy from T; two recommendations after it join it
        await h.dimension(mood("ann", "happy", T))
        await h.event(rec("ann", "tea", T + 10, "j1"))
        await h.event(rec("ann", "cake", T + 30, "j2"))
        assert [(o["id"], o["mood"]) for o in h.outputs()] == [("j1", "happy"), ("j2", "happy")]
        # 2. a tombstone for ann, stamped T + 20 (late): j2, after it, is corrected to null;
        #    j1, before it, keeps its mood
        await h.tombstone("ann", T + 20)
        [fix] = h.outputs()[2:]
        assert {k: fix[k] for k in ("id", "mood", "mood_event_time", "revision", "cause")} == {
            "id": "j2",
            "mood": None,
            "mood_event_time": None,
            "revision": 2,
            "cause": "late-dimension",
        }
        assert fix["previous_mood"] == "happy"
        # 3. an event after the tombstone answers null at once
        await h.event(rec("ann", "pie", T + 40, "j3"))
        assert (h.outputs()[-1]["id"], h.outputs()[-1]["mood"]) == ("j3", None)
        # 4. the end is a version row of its own (its time, no values), counted, and the key's
        #    view shows it as an end
        assert h.tables.joins[version_key("ann", T + 20, [])] == [T + 20]
        assert count(jm.tombstones, "moods", settings.moods_topic) == ended0 + 1
        assert EventTimeReader(h.engine).read("ann", 0)["versions"] == [
            {"event_time": T, "mood": "happy"},
            {"event_time": T + 20, "mood": None, "ended": True},
        ]
        # 5. a new mood after the end answers the events after it again
        n = len(h.outputs())
        await h.dimension(mood("ann", "calm", T + 35))
        assert [(o["id"], o["mood"], o["revision"]) for o in h.outputs()[n:]] == [("j3", "calm", 2)]
        latest = {o["id"]: o for o in h.outputs()}
        assert {k: (v["mood"], v["revision"]) for k, v in latest.items()} == {
            "j1": ("happy", 1),
            "j2": (None, 2),  # T + 30 is before the calm mood at T + 35: still ended
            "j3": ("calm", 2),
        }


async def test_inner_holds_an_event_after_a_tombstone_until_a_version_follows(join_harness):
    async with join_harness("movies") as h:
        await h.dimension(movie("m1", "Alien", T))
        await h.tombstone("m1", T + 100)
        # 1. a rating after the end: held (no revision), as if no movie were known
        await h.event(rating("r1", "m1", T + 150))
        assert h.outputs() == []
        assert h.joins("m1")["r1"].revision == 0
        # 2. a rating before the end joins the title at once
        await h.event(rating("r0", "m1", T + 50))
        assert [(o["id"], o["title"]) for o in h.outputs()] == [("r0", "Alien")]
        # 3. the movie comes back after the end: r1 is released with the new title
        await h.dimension(movie("m1", "Aliens", T + 120))
        assert [(o["id"], o["title"], o["revision"]) for o in h.outputs()[1:]] == [
            ("r1", "Aliens", 1)
        ]


async def test_a_tombstone_on_an_events_topic_is_a_dead_letter_that_says_it_deletes_nothing(
    join_harness,
):
    async with join_harness("moods") as h:
        await h.put(settings.events_topic, "ann", None, timestamp=T)
        [dead] = h.outputs(settings.dead_letter_topic)
        assert dead["topic"] == settings.events_topic and dead["error"] == NOT_A_DELETE
        assert h.outputs() == []


async def test_a_tombstone_with_no_key_is_a_dead_letter_and_one_for_an_unknown_key_is_kept(
    join_harness,
):
    async with join_harness("moods") as h:
        # 1. no key: nothing to delete, said so
        await h.tombstone(None, T)
        [dead] = h.outputs(settings.dead_letter_topic)
        assert "a tombstone without a key" in dead["error"]
        # 2. a key with no version: harmless (nothing answers differently), but kept as the
        #    key's end: a mood stamped before it, arriving after it, is ended by it
        await h.tombstone("bob", T + 20)
        assert h.tables.joins[version_key("bob", T + 20, [])] == [T + 20]
        await h.event(rec("bob", "tea", T + 30, "b1"))
        await h.dimension(mood("bob", "sad", T + 10))
        latest = {o["id"]: o for o in h.outputs()}
        assert (latest["b1"]["mood"], latest["b1"]["revision"]) == (None, 1)


def with_tombstones(rng: random.Random) -> list[tuple[str, Any]]:
    """Random moods and recommendations (:func:`random_moods`) with tombstones among them."""
    recs: list[tuple[str, Any]] = list(random_moods(rng))
    for _ in range(rng.randrange(1, 6)):
        recs.insert(
            rng.randrange(len(recs) + 1),
            ("end", (rng.choice(["ann", "bob", "cy", "dee"]), T + rng.randrange(40) * 1000)),
        )
    return recs


async def test_random_orders_with_tombstones_converge_on_the_exact_answer(join_harness):
    rng = random.Random(20261206)
    async with join_harness("moods") as h:
        for _ in range(25):
            records = with_tombstones(rng)
            h.clear()
            for side, value in records:
                if side == "end":
                    name, t = value
                    await h.tombstone(name, t, partition_of(name))
                else:
                    key = value["consultant" if side == "event" else "name"]
                    await (h.event if side == "event" else h.dimension)(value, partition_of(key))
            latest: dict[str, Any] = {}
            for out in h.outputs():
                if out["id"] not in latest or out["revision"] >= latest[out["id"]]["revision"]:
                    latest[out["id"]] = out
            plain = [(s, v) for s, v in records if s != "end"]
            want = expected(h.spec, plain)
            ends = [(name, [t]) for s, (name, t) in ((s, v) for s, v in records if s == "end")]
            if ends:  # the oracle with the ends too
                events = [
                    h.spec.event_of(h.spec.events.model.model_validate(v))
                    for s, v in plain
                    if s == "event"
                ]
                versions = [
                    (v["name"], [v["event_time"], v["mood"]]) for s, v in plain if s == "dim"
                ]
                want = exact_answer(h.spec.rules, versions + ends, events)
            assert as_results(h.spec, latest) == want, records

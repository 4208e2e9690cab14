"""The mood join is the ``moods`` spec on the one engine: its scenarios in numbered steps, then
shuffled-arrival properties, run through the engine's per-key layout (:mod:`tests.replay`)
and checked against the independent oracle (:mod:`tests.oracle`)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.joins.catalog import mood_spec
from app.joins.resolve import resolve
from app.logic.event_join import Event, KeyState, add_event, add_version, revisit
from app.logic.histories import as_of
from app.settings import Settings
from tests.oracle import Mood, Recommendation, exact_mood_joins, join_id, mood_answer
from tests.replay import MoodReplay

MOODS = resolve(mood_spec(Settings())).rules


def test_the_mood_spec_is_left_mode_and_strictly_before():
    assert (MOODS.asof, MOODS.mode) == ("before", "left")


def test_as_of_is_strictly_before_and_ties_take_the_greatest_mood():
    moods = sorted([[10, "sad"], [20, "happy"], [20, "angry"], [30, "calm"]])
    assert as_of(moods, 10, MOODS.asof) is None  # a mood at t does not apply at t
    assert as_of(moods, 11, MOODS.asof) == [10, "sad"]
    assert as_of(moods, 21, MOODS.asof) == [20, "happy"]  # "happy" > "angry"
    assert as_of(moods, 10_000, MOODS.asof) == [30, "calm"]


def test_join_id_uses_given_id_else_a_stable_digest():
    r = MoodReplay()
    [given_id] = r.add(Recommendation("ann", "tea", 5, "x1"))
    [derived] = r.add(Recommendation("ann", "tea", 5))
    assert given_id["id"] == "x1"
    assert derived["id"] == join_id("ann", 5, "tea", None) and derived["id"].startswith("r-")


def test_scenario_late_mood_corrects_then_duplicate_changes_nothing():
    r = MoodReplay()
    # 1. recommendation at t=100 arrives first: no mood known yet
    [r1] = r.add(Recommendation("ann", "tea", 100, "j"))
    assert (r1["revision"], r1["mood"], r1["cause"]) == (1, None, "arrival")
    # 2. the mood at t=50 arrives late: the join is corrected at once
    [r2] = r.add(Mood("ann", "happy", 50))
    assert (r2["revision"], r2["mood"], r2["previous_mood"], r2["cause"]) == (
        2,
        "happy",
        None,
        "late-dimension",
    )
    # 3. a mood after the recommendation changes nothing
    assert r.add(Mood("ann", "sad", 150)) == []
    # 4. a newer mood still before it wins, saying what it replaces
    [r3] = r.add(Mood("ann", "calm", 70))
    assert (r3["revision"], r3["mood"], r3["previous_mood"]) == (3, "calm", "happy")
    # 5. duplicates of both inputs emit nothing
    assert r.add(Mood("ann", "calm", 70)) == []
    assert r.add(Recommendation("ann", "tea", 100, "j")) == []
    # 6. re-emitting current state repeats revision 3 exactly
    assert r.current() == [r3]


def _state() -> KeyState:
    s = KeyState()
    add_version(MOODS, s, "ann", [10, "a"])
    add_version(MOODS, s, "ann", [20, "b"])
    return s


def test_revisit_reviews_recent_joins_and_purges_behind_the_horizon():
    s = _state()
    add_event(MOODS, s, Event("ann", "old", 15, ("old",)))
    add_event(MOODS, s, Event("ann", "new", 40, ("new",)))
    s.joins["new"].answer = ["tampered"]  # state that disagrees with the moods
    revisions, purged = revisit(MOODS, s, "ann", review_from=30, horizon=25)
    assert [(r.id, r.answer, r.previous, r.cause) for r in revisions] == [
        ("new", ("b",), ("tampered",), "revisit")
    ]
    assert list(s.joins) == ["new"] and purged.joins == 1
    assert s.history == [[20, "b"]] and purged.versions == 1


def test_revisit_outside_the_review_window_leaves_joins_alone():
    s = _state()
    add_event(MOODS, s, Event("ann", "j", 40, ("x",)))
    s.joins["j"].answer = ["tampered"]
    assert revisit(MOODS, s, "ann", review_from=41, horizon=0)[0] == []


# ---- properties: any arrival order converges on the oracle's answer -------------------------

names = st.sampled_from(["ann", "bob", "cy"])
moods = st.builds(Mood, names, st.sampled_from(["happy", "sad", "calm"]), st.integers(0, 40))
recs = st.builds(
    Recommendation,
    names,
    st.sampled_from(["tea", "cake"]),
    st.integers(0, 40),
    st.one_of(st.none(), st.uuids().map(str)),
)


@st.composite
def arrivals(draw: Any) -> list[Any]:
    ms = draw(st.lists(moods, max_size=25))
    rs = draw(st.lists(recs, max_size=25, unique_by=lambda r: r.join_id))
    dups = draw(st.lists(st.sampled_from(ms + rs), max_size=5)) if ms + rs else []
    return draw(st.permutations(ms + rs + dups))


def run(records: list[Any]) -> list[dict[str, Any]]:
    r = MoodReplay()
    return [rev for rec in records for rev in r.add(rec)]


@settings(max_examples=300, deadline=None)
@given(arrivals())
def test_latest_revision_per_id_equals_the_exact_answer(records):
    latest = {r["id"]: mood_answer(r) for r in run(records)}  # the last one wins
    assert latest == exact_mood_joins(
        [r for r in records if isinstance(r, Mood)],
        [r for r in records if isinstance(r, Recommendation)],
    )


@settings(max_examples=300, deadline=None)
@given(arrivals())
def test_revisions_increase_by_one_and_only_on_change(records):
    history: dict[str, list[dict[str, Any]]] = {}
    for r in run(records):
        history.setdefault(r["id"], []).append(r)
    for revs in history.values():
        assert [r["revision"] for r in revs] == list(range(1, len(revs) + 1))
        assert revs[0]["previous_mood"] is None and revs[0]["cause"] == "arrival"
        for before, after in zip(revs, revs[1:]):
            assert mood_answer(after) != mood_answer(before)  # nothing when nothing changed
            assert after["previous_mood"] == before["mood"]  # consumers can retract

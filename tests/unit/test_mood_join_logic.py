"""Pure mood-join logic: scenarios in numbered steps, then properties over shuffled arrivals."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.logic.asof import join_id, mood_as_of, purge_moods
from app.logic.mood_join import (
    ConsultantState,
    Mood,
    Recommendation,
    Revision,
    add_mood,
    add_recommendation,
    current_revisions,
    exact_mood_joins,
    revisit,
)


def test_as_of_is_strictly_before_and_ties_take_the_greatest_mood():
    moods = sorted([(10, "sad"), (20, "happy"), (20, "angry"), (30, "calm")])
    assert mood_as_of(moods, 10) == (None, None)  # a mood at t does not apply at t
    assert mood_as_of(moods, 11) == ("sad", 10)
    assert mood_as_of(moods, 21) == ("happy", 20)  # "happy" > "angry"
    assert mood_as_of(moods, 10_000) == ("calm", 30)


def test_purge_keeps_the_last_mood_before_the_horizon():
    moods = [(10, "a"), (20, "b"), (30, "c"), (40, "d")]
    assert purge_moods(moods, 35) == [(30, "c"), (40, "d")]
    assert purge_moods(moods, 5) == moods
    assert purge_moods(moods, 100) == [(40, "d")]


def test_join_id_uses_given_id_else_a_stable_digest():
    assert join_id("ann", 5, "tea", "x1") == "x1"
    derived = join_id("ann", 5, "tea", None)
    assert derived == join_id("ann", 5, "tea", None) and derived.startswith("r-")
    assert derived != join_id("ann", 6, "tea", None) != join_id("bob", 5, "tea", None)


def test_scenario_late_mood_corrects_then_duplicate_changes_nothing():
    s = ConsultantState()
    # 1. recommendation at t=100 arrives first: no mood known yet
    [r1] = add_recommendation(s, Recommendation("ann", "tea", 100, "j"))
    assert (r1.revision, r1.mood, r1.cause) == (1, None, "arrival")
    # 2. the mood at t=50 arrives late: the join is corrected at once, saying what it replaces
    changed, [r2] = add_mood(s, Mood("ann", "happy", 50))
    assert changed and (r2.revision, r2.mood, r2.previous_mood, r2.cause) == (
        2, "happy", None, "late-dimension")
    # 3. a mood after the recommendation changes nothing
    assert add_mood(s, Mood("ann", "sad", 150)) == (True, [])
    # 4. a newer mood still before it wins: europe's +1 becomes africa's
    _, [r3] = add_mood(s, Mood("ann", "calm", 70))
    assert (r3.revision, r3.mood, r3.previous_mood) == (3, "calm", "happy")
    # 5. duplicates of both inputs emit nothing
    assert add_mood(s, Mood("ann", "calm", 70)) == (False, [])
    assert add_recommendation(s, Recommendation("ann", "tea", 100, "j")) == []
    # 6. re-emitting current state repeats revision 3 exactly
    assert list(current_revisions(s, "ann")) == [r3]


def test_revisit_reviews_recent_joins_and_purges_behind_the_horizon():
    s = ConsultantState()
    add_mood(s, Mood("ann", "a", 10))
    add_mood(s, Mood("ann", "b", 20))
    add_recommendation(s, Recommendation("ann", "old", 15, "old"))
    add_recommendation(s, Recommendation("ann", "new", 40, "new"))
    s.joins["new"].mood = "tampered"  # state that disagrees with the moods
    revisions, dropped, moods_dropped = revisit(s, "ann", review_from=30, horizon=25)
    assert [(r.id, r.mood, r.previous_mood, r.cause) for r in revisions] == [
        ("new", "b", "tampered", "revisit")]
    assert list(s.joins) == ["new"] and dropped == 1
    assert s.moods == [(20, "b")] and moods_dropped == 1


def test_revisit_outside_the_review_window_leaves_joins_alone():
    s = ConsultantState()
    add_recommendation(s, Recommendation("ann", "x", 40, "j"))
    s.joins["j"].mood = "tampered"
    assert revisit(s, "ann", review_from=41, horizon=0)[0] == []


# ---- properties: any arrival order converges on the brute-force answer ----------------------

names = st.sampled_from(["ann", "bob", "cy"])
moods = st.builds(Mood, names, st.sampled_from(["happy", "sad", "calm"]), st.integers(0, 40))
recs = st.builds(Recommendation, names, st.sampled_from(["tea", "cake"]), st.integers(0, 40),
                 st.one_of(st.none(), st.uuids().map(str)))


@st.composite
def arrivals(draw: Any) -> list[Any]:
    ms = draw(st.lists(moods, max_size=25))
    rs = draw(st.lists(recs, max_size=25, unique_by=lambda r: r.join_id))
    dups = draw(st.lists(st.sampled_from(ms + rs), max_size=5)) if ms + rs else []
    return draw(st.permutations(ms + rs + dups))


def run(records: list[Any]) -> list[Revision]:
    states: dict[str, ConsultantState] = {}
    out: list[Revision] = []
    for rec in records:
        if isinstance(rec, Mood):
            out += add_mood(states.setdefault(rec.name, ConsultantState()), rec)[1]
        else:
            out += add_recommendation(states.setdefault(rec.consultant, ConsultantState()), rec)
    for name, state in states.items():  # a revisit of consistent state changes nothing
        assert revisit(state, name, review_from=0, horizon=0)[0] == []
    return out


@settings(max_examples=300, deadline=None)
@given(arrivals())
def test_latest_revision_per_id_equals_the_exact_answer(records):
    out = run(records)
    latest = {r.id: r.answer for r in out}  # emission order: the last one wins
    assert latest == exact_mood_joins([r for r in records if isinstance(r, Mood)],
                                      [r for r in records if isinstance(r, Recommendation)])


@settings(max_examples=300, deadline=None)
@given(arrivals())
def test_revisions_increase_by_one_and_only_on_change(records):
    history: dict[str, list[Revision]] = {}
    for r in run(records):
        history.setdefault(r.id, []).append(r)
    for revs in history.values():
        assert [r.revision for r in revs] == list(range(1, len(revs) + 1))
        assert revs[0].previous_mood is None and revs[0].cause == "arrival"
        for before, after in zip(revs, revs[1:]):
            assert after.answer != before.answer  # nothing emitted when nothing changed
            assert after.previous_mood == before.mood  # consumers can retract what they counted

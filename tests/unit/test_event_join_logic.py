"""The generic join rules, pure: scenarios in numbered steps, then shuffled-arrival properties
for both built-in specs (moods: left + strictly before; movies: inner + at-or-before-else-earliest).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.logic.event_join import (
    Event,
    Join,
    JoinRules,
    KeyState,
    Revision,
    add_event,
    add_version,
    current_revisions,
    derive_id,
    revisit,
    unsent_revisions,
)
from app.logic.histories import as_of, end, purge_history
from tests.oracle import Mood, Recommendation, answered, exact_answer, exact_mood_joins, join_id

MOODS = JoinRules("before", "left")
MOVIES = JoinRules("at-or-before-else-earliest", "inner")


def test_as_of_rules_and_the_tie_rule():
    h = sorted([[10, "a"], [20, "b"], [20, "c"], [30, "d"]])
    # strictly before; none -> None
    assert as_of(h, 10, "before") is None
    assert as_of(h, 20, "before") == [10, "a"]
    assert as_of(h, 21, "before") == [20, "c"]  # tie on time: the greatest value
    # at or before; before every version -> the earliest
    assert as_of(h, 20, "at-or-before-else-earliest") == [20, "c"]
    assert as_of(h, 5, "at-or-before-else-earliest") == [10, "a"]
    tied_first = sorted([[10, "x"], [10, "y"], [20, "z"]])
    assert as_of(tied_first, 0, "at-or-before-else-earliest") == [10, "y"]
    assert as_of([], 5, "at-or-before-else-earliest") is None


def test_derived_id_is_the_mood_joins_id():
    assert derive_id(["ann", 5, "tea"]) == join_id("ann", 5, "tea", None)


def test_purge_keeps_the_last_version_before_the_horizon():
    h = [[10, "a"], [20, "b"], [30, "c"]]
    assert purge_history(h, 25) == [[20, "b"], [30, "c"]]
    assert purge_history(h, 5) == h and purge_history(h, 99) == [[30, "c"]]


def rating(rid: str, t: int, movie: str = "m1", user: str = "u1", stars: float = 4.0) -> Event:
    return Event(movie, rid, t, (user, stars))


def test_inner_holds_a_rating_until_its_movie_arrives_then_releases_it():
    s = KeyState()
    # 1. a rating arrives before any version of its movie: held, nothing emitted
    assert add_event(MOVIES, s, rating("r1", 100)) == (True, [])
    assert s.joins["r1"].revision == 0
    # 2. the movie arrives with a version *after* the rating: the earliest version applies
    changed, [rev] = add_version(MOVIES, s, "m1", [150, "Alien"])
    assert changed and (
        rev.id,
        rev.answer,
        rev.answer_time,
        rev.revision,
        rev.previous,
        rev.cause,
    ) == ("r1", ("Alien",), 150, 1, None, "late-dimension")
    # 3. an earlier version now applies (greatest at or before 100): a correction
    _, [rev2] = add_version(MOVIES, s, "m1", [90, "Alien (working title)"])
    assert (rev2.answer, rev2.revision, rev2.previous) == (
        ("Alien (working title)",),
        2,
        ("Alien",),
    )
    # 4. a rating after both joins the latest at or before it, at once
    _, [rev3] = add_event(MOVIES, s, rating("r2", 200))
    assert (rev3.answer, rev3.revision, rev3.cause) == (("Alien",), 1, "arrival")
    # 5. duplicates change nothing
    assert add_version(MOVIES, s, "m1", [150, "Alien"]) == (False, [])
    assert add_event(MOVIES, s, rating("r2", 200)) == (False, [])


def test_a_held_rating_whose_movie_never_arrives_is_counted_at_the_horizon_not_emitted():
    s = KeyState()
    add_event(MOVIES, s, rating("r1", 100))
    revisions, purged = revisit(MOVIES, s, "m1", review_from=None, horizon=101)
    assert revisions == [] and (purged.joins, purged.unmatched) == (1, 1)
    assert list(current_revisions(MOVIES, s, "m1")) == []


def test_a_held_rating_older_than_the_emit_window_is_not_released():
    s = KeyState()
    add_event(MOVIES, s, rating("old", 100))
    add_event(MOVIES, s, rating("new", 500))
    _, revs = add_version(MOVIES, s, "m1", [50, "Up"], release_from=200)
    assert [r.id for r in revs] == ["new"] and s.joins["old"].revision == 0


# ---- ends: a tombstone on the dimension topic ends the key's version at its time -------------


def test_an_end_is_a_version_with_no_value_that_loses_ties():
    h = sorted([[10, "a"], end(20), [30, "b"], end(30), end(40)])
    assert h == [[10, "a"], [20], [30], [30, "b"], [40]]  # at one time, the end sorts first
    assert as_of(h, 25, "before") == [20]  # an end answers ...
    assert MOODS.answer(h, 25) == (None, None)  # ... as if no version were known
    assert MOODS.answer(h, 35) == (["b"], 30)  # a version and an end at one ms: the version
    assert MOODS.answer(h, 41) == (None, None)
    assert MOVIES.answer([end(5), [9, "Up"]], 1) == (None, None)  # the earliest is an end
    assert purge_history(h, 35) == [[30, "b"], [40]]  # the purge keeps the greatest, as ever


def test_a_late_end_corrects_the_joins_it_ends_and_a_later_version_restarts_them():
    s = KeyState()
    add_version(MOODS, s, "ann", [10, "happy"])
    _, [r1] = add_event(MOODS, s, Event("ann", "j1", 50, ("tea",)))
    _, [r2] = add_event(MOODS, s, Event("ann", "j2", 20, ("cake",)))
    assert (r1.answer, r2.answer) == (("happy",), ("happy",))
    # 1. an end at 30, late: j1 (after it) loses its answer, j2 (before it) keeps it
    changed, [c] = add_version(MOODS, s, "ann", end(30))
    assert changed and (c.id, c.answer, c.answer_time, c.revision, c.previous, c.cause) == (
        "j1",
        None,
        None,
        2,
        ("happy",),
        "late-dimension",
    )
    # 2. an event after the end answers null at once (left)
    _, [r3] = add_event(MOODS, s, Event("ann", "j3", 60, ("pie",)))
    assert (r3.answer, r3.revision) == (None, 1)
    # 3. a version after the end restarts the key for the events after it
    _, revs = add_version(MOODS, s, "ann", [40, "calm"])
    assert sorted((r.id, r.answer, r.revision) for r in revs) == [
        ("j1", ("calm",), 3),
        ("j3", ("calm",), 2),
    ]
    # 4. the same end again changes nothing
    assert add_version(MOODS, s, "ann", end(30)) == (False, [])


def test_inner_holds_an_event_after_an_end_and_retracts_one_a_late_end_takes():
    s = KeyState()
    add_version(MOVIES, s, "m1", [10, "Alien"])
    add_version(MOVIES, s, "m1", end(100))
    # 1. a rating after the end: held, as with no version
    assert add_event(MOVIES, s, rating("r1", 150)) == (True, [])
    assert s.joins["r1"].revision == 0
    # 2. a rating before it joins the version
    _, [r2] = add_event(MOVIES, s, rating("r2", 50))
    assert r2.answer == ("Alien",)
    # 3. a late end before r2 takes its answer: a null revision, the retraction
    _, [c] = add_version(MOVIES, s, "m1", end(40))
    assert (c.id, c.answer, c.revision, c.previous) == ("r2", None, 2, ("Alien",))
    # 4. a version after the first end releases r1
    _, [r1] = add_version(MOVIES, s, "m1", [120, "Aliens"])
    assert (r1.id, r1.answer, r1.revision) == ("r1", ("Aliens",), 1)


def test_final_joins_behind_the_horizon_are_left_alone():
    s = KeyState()
    add_event(MOODS, s, Event("ann", "j", 100, ("tea",)))
    assert add_version(MOODS, s, "ann", [50, "happy"], final_before=101) == (True, [])
    assert s.joins["j"].answer is None


# ---- properties: any arrival order converges on the brute-force answer, for both specs ------

keys = st.sampled_from(["k1", "k2", "k3"])
times = st.integers(0, 40)


#: an end (a tombstone): ``[t]``, a version with no value (app.logic.histories.end)
ends = st.builds(end, times)


def moods_records() -> Any:
    versions = st.tuples(
        keys,
        st.one_of(
            st.builds(lambda t, m: [t, m], times, st.sampled_from(["happy", "sad", "calm"])),
            ends,
        ),
    )
    events = st.builds(
        lambda k, t, rec, given: Event(k, given or derive_id([k, t, rec]), t, (rec,)),
        keys,
        times,
        st.sampled_from(["tea", "cake"]),
        st.one_of(st.none(), st.uuids().map(str)),
    )
    return versions, events


def movies_records() -> Any:
    versions = st.tuples(
        keys,
        st.one_of(
            st.builds(
                lambda t, title: [t, title], times, st.sampled_from(["Alien", "Aliens", "Up"])
            ),
            ends,
        ),
    )
    events = st.builds(
        lambda k, t, rid, user, stars: Event(k, rid, t, (user, stars)),
        keys,
        times,
        st.uuids().map(str),
        st.sampled_from(["u1", "u2"]),
        st.sampled_from([1.0, 3.5, 5.0]),
    )
    return versions, events


@st.composite
def arrivals(draw: Any, records: Any) -> list[Any]:
    versions, events = records
    vs = draw(st.lists(versions, max_size=20))
    es = draw(st.lists(events, max_size=20, unique_by=lambda e: e.id))
    both = vs + es
    dups = draw(st.lists(st.sampled_from(both), max_size=5)) if both else []
    return draw(st.permutations(both + dups))


def run(rules: JoinRules, records: list[Any]) -> tuple[list[Revision], dict[str, KeyState]]:
    states: dict[str, KeyState] = {}
    out: list[Revision] = []
    for rec in records:
        if isinstance(rec, Event):
            out += add_event(rules, states.setdefault(rec.key, KeyState()), rec)[1]
        else:
            key, version = rec
            out += add_version(rules, states.setdefault(key, KeyState()), key, list(version))[1]
    for key, state in states.items():  # a review of consistent state changes nothing
        assert revisit(rules, state, key, review_from=0, horizon=0)[0] == []
    return out, states


def split(records: list[Any]) -> tuple[list[tuple[str, list[Any]]], list[Event]]:
    return (
        [r for r in records if not isinstance(r, Event)],
        [r for r in records if isinstance(r, Event)],
    )


@settings(max_examples=300, deadline=None)
@given(arrivals(moods_records()))
def test_moods_spec_converges_on_the_exact_answer_of_the_mood_join(records):
    out, _ = run(MOODS, records)
    latest = {r.id: r.result for r in out}
    versions, events = split(records)
    assert latest == exact_answer(MOODS, versions, events)
    # ... which is the original mood join's oracle, field for field (ends too)
    a = exact_mood_joins(
        [Mood(k, v[1], v[0]) for k, v in versions if len(v) > 1],
        [
            Recommendation(
                e.key, e.payload[0], e.event_time, None if e.id.startswith("r-") else e.id
            )
            for e in events
        ],
        [(k, v[0]) for k, v in versions if len(v) == 1],
    )
    assert {
        jid: (r[0], r[1], r[2], (r[3],), None if r[4] is None else (r[4],), r[5])
        for jid, r in a.items()
    } == latest


@settings(max_examples=300, deadline=None)
@given(arrivals(movies_records()))
def test_movies_spec_converges_emits_only_matched_and_counts_the_rest(records):
    out, states = run(MOVIES, records)
    latest = {r.id: r.result for r in out}
    versions, events = split(records)
    assert answered(latest) == exact_answer(MOVIES, versions, events)
    # inner: never a null title, but an end's retraction of one emitted
    assert all(r.answer is not None or r.revision > 1 for r in out)
    if not any(len(v) == 1 for _, v in versions):
        assert answered(latest) == latest
    never = {e.id for e in events} - set(latest)  # no movie answered them, ever
    unmatched = sum(
        revisit(MOVIES, s, k, None, horizon=10**9)[1].unmatched for k, s in states.items()
    )
    assert unmatched == len(never)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([(MOODS, moods_records()), (MOVIES, movies_records())]).flatmap(
        lambda rr: st.tuples(st.just(rr[0]), arrivals(rr[1]))
    )
)
def test_revisions_increase_by_one_and_only_on_change(rules_and_records):
    rules, records = rules_and_records
    history: dict[str, list[Revision]] = {}
    for r in run(rules, records)[0]:
        history.setdefault(r.id, []).append(r)
    for revs in history.values():
        assert [r.revision for r in revs] == list(range(1, len(revs) + 1))
        assert revs[0].previous is None
        for before, after in zip(revs, revs[1:]):
            assert after.result != before.result
            assert after.previous == before.answer  # consumers can retract what they counted


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([(MOODS, moods_records()), (MOVIES, movies_records())]).flatmap(
        lambda rr: st.tuples(st.just(rr[0]), arrivals(rr[1]))
    )
)
def test_a_join_keeps_every_revision_it_superseded_until_delivered(rules_and_records):
    """Gap-free after a crash: with nothing known delivered, what a join re-emits is every
    revision it ever emitted, in order and field for field, also through its stored row."""
    rules, records = rules_and_records
    out, states = run(rules, records)
    never = lambda src: False  # noqa: E731
    again = [r for key, s in states.items() for r in current_revisions(rules, s, key, never)]
    by_id = lambda revs: {r.id: [x for x in revs if x.id == r.id] for r in revs}  # noqa: E731
    assert by_id(again) == by_id(out)
    n_pay = 1 if rules is MOODS else 2
    for key, s in states.items():
        for jid, j in s.joins.items():
            stored = Join.from_json(j.to_json(1), n_pay, 1)
            assert unsent_revisions(rules, jid, key, stored, never) == unsent_revisions(
                rules, jid, key, j, never
            )
            assert unsent_revisions(rules, jid, key, stored, lambda src: True) == (
                [rules.current(jid, key, j)] if j.revision else []
            )


def test_a_stored_join_from_before_sources_were_kept_still_decodes():
    old = [100, "tea", "happy", 50, 3, "late-dimension", "sad"]  # the mood join's row
    j = Join.from_json(old, 1, 1)
    assert (j.revision, j.source, j.unsent) == (3, None, [])
    assert j.to_json(1) == old

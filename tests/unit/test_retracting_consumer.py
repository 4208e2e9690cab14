"""The retracting mood-count consumer: scenarios, then properties over faulty deliveries.

The fault tests on the broker (tests/broker/test_faults_*.py, tests/broker/test_duplicates.py) check the same
fold over the real output topic after each fault; here the deliveries are generated.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.downstream.mood_counts import MoodCounts, counts_of_answers, fold
from tests.oracle import Mood, Recommendation, exact_mood_joins
from tests.replay import MoodReplay


def rev(jid: str, n: int, mood: str | None, previous: str | None) -> dict[str, Any]:
    return {"id": jid, "revision": n, "mood": mood, "previous_mood": previous}


def test_a_correction_moves_the_count_from_the_old_mood_to_the_new():
    c = MoodCounts()
    # 1. a click counted for europe
    c.apply(rev("click", 1, "europe", None))
    assert c.as_dict() == {"europe": 1}
    # 2. it turns out to be africa's: (europe, -1), (africa, +1)
    c.apply(rev("click", 2, "africa", "europe"))
    assert c.as_dict() == {"africa": 1}
    # 3. a join with no mood yet counts under null, and moves out when corrected
    c.apply(rev("other", 1, None, None))
    c.apply(rev("other", 2, "africa", None))
    assert c.as_dict() == {"africa": 2}


def test_repeated_and_stale_revisions_never_count_twice():
    c = fold(
        [
            rev("a", 1, "x", None),
            rev("a", 1, "x", None),  # producer retry
            rev("a", 2, "y", "x"),
            rev("a", 2, "y", "x"),  # re-emitted after a restart
            rev("a", 1, "x", None),
        ]
    )  # a replayed old revision after a newer one
    assert c.as_dict() == {"y": 1}
    assert c.ignored == 3 and c.mismatches == 0


def test_a_gap_retracts_what_the_fold_counted_not_previous_mood():
    # revision 2 (x -> y) was never seen: revision 3 says previous_mood y, but x was counted
    c = fold([rev("a", 1, "x", None), rev("a", 3, "z", "y")])
    assert c.as_dict() == {"z": 1}


def test_a_consumer_starting_mid_log_does_not_undo_what_it_never_added():
    c = fold([rev("a", 4, "z", "y")])
    assert c.as_dict() == {"z": 1}


def test_previous_mood_that_disagrees_with_the_count_is_reported():
    c = fold([rev("a", 1, "x", None), rev("a", 2, "z", "q")])
    assert c.mismatches == 1 and c.as_dict() == {"z": 1}


# --- properties: the revision log the pure join emits, delivered badly -------------------------

inputs = st.lists(
    st.one_of(
        st.tuples(
            st.just("mood"),
            st.sampled_from("ab"),
            st.integers(0, 40),
            st.sampled_from(["europe", "africa", "asia"]),
        ),
        st.tuples(
            st.just("rec"),
            st.sampled_from("ab"),
            st.integers(0, 40),
            st.sampled_from(["tea", "map"]),
        ),
    ),
    min_size=1,
    max_size=40,
)


def revision_log(
    records: list[tuple[str, str, int, str]],
    rng: random.Random,
) -> list[dict[str, Any]]:
    """Run the join in ``records`` order, with the faults of an at-least-once pipeline:
    outputs repeated (producer retry) and, now and then, every current revision re-emitted
    (what a worker does after a restart)."""
    replay = MoodReplay()
    log: list[dict[str, Any]] = []
    for kind, who, t, what in records:
        revs = replay.add(Mood(who, what, t) if kind == "mood" else Recommendation(who, what, t))
        for r in revs:
            log.append(r)
            if rng.random() < 0.2:
                log.append(r)
        if rng.random() < 0.15:
            log.extend(replay.current())
    return log


@settings(max_examples=300, deadline=None)
@given(inputs, st.randoms(use_true_random=False))
def test_fold_equals_counts_over_the_exact_answer_for_any_arrival_and_delivery(records, rnd):
    rng = random.Random(rnd.random())
    arrival = list(records)
    rng.shuffle(arrival)
    log = revision_log(arrival, rng)

    exact = exact_mood_joins(
        [Mood(w, x, t) for k, w, t, x in records if k == "mood"],
        [Recommendation(w, x, t) for k, w, t, x in records if k == "rec"],
    )
    c = fold(log)
    assert c.as_dict() == counts_of_answers(a[4] for a in exact.values())
    assert c.mismatches == 0  # consecutive revisions always say what they replace


@settings(max_examples=100, deadline=None)
@given(inputs, st.randoms(use_true_random=False))
def test_replaying_the_whole_log_again_changes_nothing(records, rnd):
    log = revision_log(list(records), random.Random(rnd.random()))
    once = fold(log)
    twice = fold(log, into=fold(log))
    assert twice.as_dict() == once.as_dict()

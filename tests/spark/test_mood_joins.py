"""The batch mood join gives the stream's answer: scenarios, then a property over random data.

Every as-of method (:data:`app.batch.mood_joins.METHODS`) is held to the same scenarios and the
same property against the independent oracle (:mod:`tests.oracle`).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from app.batch.mood_joins import (
    METHODS,
    backfill_revisions,
    compare_joins,
    latest_revisions,
    mood_joins,
)
from tests.oracle import Mood, Recommendation, exact_mood_joins, join_id, mood_answer
from tests.replay import MoodReplay

by_method = pytest.mark.parametrize("method", METHODS)

MOOD_DDL = "name string, mood string, event_time bigint"
EVENT_DDL = "consultant string, recommendation string, event_time bigint, id string"
JOIN_DDL = (
    "id string, consultant string, event_time bigint, recommendation string, "
    "mood string, mood_event_time bigint"
)
REV_DDL = JOIN_DDL + ", revision bigint, previous_mood string, cause string"


@by_method
def test_strictly_before_ties_and_derived_ids(spark, method):
    # 1. alice is happy and calm at 10 (a tie), sad at 20; bob has no mood at all
    moods = spark.createDataFrame(
        [("alice", "happy", 10), ("alice", "calm", 10), ("alice", "sad", 20)], MOOD_DDL
    )
    # 2. recommendations at 10 (a mood AT t does not count), 11, 20, 21; a replayed one; bob's
    events = spark.createDataFrame(
        [
            ("alice", "tea", 10, "r10"),
            ("alice", "cake", 11, None),
            ("alice", "cake", 11, None),
            ("alice", "nap", 20, "r20"),
            ("alice", "run", 21, ""),
            ("bob", "tea", 5, "b5"),
        ],
        EVENT_DDL,
    )
    # 3. one row per join; ties on time -> the greatest mood ("happy" > "calm")
    expected = spark.createDataFrame(
        [
            ("r10", "alice", 10, "tea", None, None),
            (join_id("alice", 11, "cake", None), "alice", 11, "cake", "happy", 10),
            ("r20", "alice", 20, "nap", "happy", 10),
            (join_id("alice", 21, "run", None), "alice", 21, "run", "sad", 20),
            ("b5", "bob", 5, "tea", None, None),
        ],
        JOIN_DDL,
    )
    assertDataFrameEqual(mood_joins(moods, events, method), expected)


def test_the_native_method_plans_spark_s_sort_merge_as_of_join(spark):
    moods = spark.createDataFrame([("a", "x", 1)], MOOD_DDL)
    events = spark.createDataFrame([("a", "p", 2, "e")], EVENT_DDL)
    plan = mood_joins(moods, events, "asof-join")._jdf.queryExecution().executedPlan().toString()
    assert "SortMergeAsOfJoin" in plan
    with pytest.raises(ValueError, match="unknown as-of method"):
        mood_joins(moods, events, "range")


def test_latest_revision_comparison_and_backfill_revisions(spark):
    exact = spark.createDataFrame(
        [
            ("a", "ann", 10, "tea", "sad", 5),  # the log says happy: wrong
            ("b", "ann", 12, "cake", "sad", 5),  # the log agrees: matched
            ("c", "ann", 14, "nap", None, None),  # never in the log: missing
        ],
        JOIN_DDL,
    )
    log = spark.createDataFrame(
        [
            ("a", "ann", 10, "tea", None, None, 1, None, "arrival", 0),
            ("a", "ann", 10, "tea", "happy", 3, 2, None, "late-dimension", 1),
            ("b", "ann", 12, "cake", "sad", 5, 1, None, "arrival", 2),
            ("b", "ann", 12, "cake", "sad", 5, 1, None, "arrival", 3),  # a re-emit
            ("z", "ann", 99, "gone", None, None, 1, None, "arrival", 4),  # not in the inputs: extra
        ],
        REV_DDL + ", _pos bigint",
    )
    latest = latest_revisions(log)
    assert {r["id"]: (r["revision"], r["revisions"]) for r in latest.collect()} == {
        "a": (2, 2),
        "b": (1, 2),
        "z": (1, 1),
    }

    comparison = compare_joins(exact, latest)
    assert dict(comparison.select("id", "status").collect()) == {
        "a": "wrong",
        "b": "matched",
        "c": "missing",
        "z": "extra",
    }

    assertDataFrameEqual(
        backfill_revisions(comparison),
        spark.createDataFrame(
            [
                ("a", "ann", 10, "tea", "sad", 5, 3, "happy", "backfill"),
                ("c", "ann", 14, "nap", None, None, 1, None, "backfill"),
            ],
            REV_DDL,
        ),
    )


# --- property: batch == stream's reference answer == stream's incremental rules ---------------

consultants = st.sampled_from(["ann", "bob", "zoë"])  # non-ASCII: UTF-8 ids
times = st.integers(min_value=0, max_value=12)  # few distinct times: ties and equal times
mood_records = st.lists(
    st.builds(Mood, consultants, st.sampled_from(["x", "y", "z"]), times), max_size=12
)
rec_records = st.lists(
    st.tuples(consultants, st.sampled_from(["p", "q"]), times, st.booleans()), max_size=12
)


def incremental_answer(
    moods: list[Mood], recs: list[Recommendation], seed: int
) -> dict[str, tuple[Any, ...]]:
    """Feed the stream's engine one record at a time in a shuffled arrival order; keep the
    latest revision per join id, as a consumer does."""
    arrivals: list[Mood | Recommendation] = [*moods, *recs]
    random.Random(seed).shuffle(arrivals)
    replay = MoodReplay()
    latest: dict[str, tuple[Any, ...]] = {}
    for item in arrivals:
        for r in replay.add(item):
            latest[r["id"]] = mood_answer(r)
    return latest


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(moods=mood_records, raw_recs=rec_records, seed=st.integers(0, 2**16))
def test_batch_answer_equals_the_stream_logic(spark, moods, raw_recs, seed):
    recs = [
        Recommendation(c, r, t, f"id{i}" if has_id else None)
        for i, (c, r, t, has_id) in enumerate(raw_recs)
    ]
    exact = exact_mood_joins(moods, recs)
    assert incremental_answer(moods, recs, seed) == exact  # the stream agrees with its oracle

    mood_df = spark.createDataFrame([(m.name, m.mood, m.event_time) for m in moods], MOOD_DDL)
    event_df = spark.createDataFrame(
        [(r.consultant, r.recommendation, r.event_time, r.id) for r in recs], EVENT_DDL
    )
    for method in METHODS:  # every method, the same answer
        assertDataFrameEqual(
            mood_joins(mood_df, event_df, method),
            [
                Row(
                    id=a[0],
                    consultant=a[1],
                    event_time=a[2],
                    recommendation=a[3],
                    mood=a[4],
                    mood_event_time=a[5],
                )
                for a in exact.values()
            ],
        )

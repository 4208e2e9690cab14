"""The batch join of any spec gives the oracle's answer: both as-of rules, both modes, both
methods, on generated records; and the Spark twins of the pure admission rules equal them.

The spec here is none of the built-ins: it copies a float, a bool and an optional string into a
derived join id (Python's ``str()`` of each, which a Java double does not print alike), and two
dimension fields (the tie rule compares them in order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.batch.admission import from_the_future as future_column
from app.batch.admission import in_range
from app.batch.spec_joins import METHODS, spec_joins
from app.joins.resolve import resolve
from app.logic.event_join import MODES
from app.logic.event_range import EventRange, needs
from app.logic.future_records import from_the_future, kafka_timestamp
from app.logic.histories import AS_OF_RULES
from tests.oracle import exact_answer, spec_join_id

EVENT_DDL = (
    "cid string, user string, at bigint, score double, flag boolean, note string, _timestamp bigint"
)
LEVEL_DDL = "user string, at bigint, level bigint, label string, _timestamp bigint"
#: ... with ends (tombstones: ``_end`` true, the copied fields null)
ENDED_DDL = LEVEL_DDL + ", _end boolean"


def click_spec(asof: str = "before", mode: str = "left") -> dict[str, Any]:
    """Clicks x user levels: a spec of no built-in shape (as a JSON file would hold it)."""
    return {
        "name": "clicks",
        "events": {
            "topic": "t-clicks",
            "key": "user",
            "time": "at",
            "id": "cid",
            "fields": {
                "cid": "str?",
                "user": "str",
                "at": "time",
                "score": "float",
                "flag": "bool",
                "note": "str?",
            },
            "copy": ["user", "at", "score", "flag", "note"],
        },
        "dimension": {
            "topic": "t-levels",
            "key": "user",
            "time": "at",
            "fields": {"user": "str", "at": "time", "level": "int", "label": "str"},
            "copy": ["level", "label"],
            "time_as": "level_at",
        },
        "output": "t-clicks-out",
        "ticks": "t-clicks-ticks",
        "mode": mode,
        "asof": asof,
        "retention_ms": 1_000,
    }


@dataclass(frozen=True)
class Click:
    """An event as the oracle reads it (key, id, event_time, payload) and as a row."""

    user: str
    at: int
    score: float
    flag: bool
    note: str | None
    cid: str | None

    @property
    def key(self) -> str:
        return self.user

    @property
    def event_time(self) -> int:
        return self.at

    @property
    def payload(self) -> tuple[Any, ...]:
        return (self.score, self.flag, self.note)

    @property
    def id(self) -> str:
        return spec_join_id((self.user, self.at, self.score, self.flag, self.note), self.cid)

    def row(self, timestamp: int | None = None) -> tuple[Any, ...]:
        return (self.cid, self.user, self.at, self.score, self.flag, self.note, timestamp)


def answers(rows: list[Any]) -> dict[str, tuple[Any, ...]]:
    """Batch output rows in the oracle's shape."""
    return {
        r["id"]: (
            r["id"],
            r["user"],
            r["at"],
            (r["score"], r["flag"], r["note"]),
            None if r["level_at"] is None else (r["level"], r["label"]),
            r["level_at"],
        )
        for r in rows
    }


users = st.sampled_from(["ann", "bob", "zoë"])
times = st.integers(0, 10)  # few distinct times: ties, equal times, events at a version's time
scores = st.sampled_from([0.1, 1e-05, 2.0, 1e16, 123.456])  # Java prints 1e-05 as 1.0E-5
clicks = st.builds(
    Click,
    users,
    times,
    scores,
    st.booleans(),
    st.sampled_from([None, "x", "None"]),
    st.sampled_from([None, "", "c1", "c2"]),
)
levels = st.tuples(users, times, st.integers(0, 2), st.sampled_from(["lo", "hi"]))
ends = st.tuples(users, times)  # a tombstone: the user's level ends at that time


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("asof", AS_OF_RULES)
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=st.lists(clicks, max_size=10),
    versions=st.lists(levels, max_size=8),
    replays=st.integers(0, 3),
    ended=st.lists(ends, max_size=3),
)
def test_any_spec_equals_the_oracle(spark, asof, mode, events, versions, replays, ended):
    spec = resolve(click_spec(asof, mode))
    # one id, one event: a given id is unique per content here (the stream keeps the last
    # arrival of two different records under one id, the batch the greatest: a producer bug)
    first: dict[str, Click] = {}
    for e in events:
        first.setdefault(e.id, e)
    events = [e for e in events if first[e.id] == e]
    events = [*events, *events[:replays]]  # a replay is one join
    expected = exact_answer(
        spec.rules,
        [(u, [t, lv, lb]) for u, t, lv, lb in versions] + [(u, [t]) for u, t in ended],
        events,
    )

    ev = spark.createDataFrame([e.row() for e in events], EVENT_DDL)
    dim = spark.createDataFrame(
        [(*v, None, False) for v in versions] + [(u, t, None, None, None, True) for u, t in ended],
        ENDED_DDL,
    )
    for method in METHODS:
        got = answers(spec_joins(spec, ev, dim, method).collect())
        assert got == expected, (method, got, expected)


def test_the_native_method_plans_the_sort_merge_as_of_join_for_both_rules(spark):
    ev = spark.createDataFrame([Click("a", 2, 1.0, True, None, "e").row()], EVENT_DDL)
    dim = spark.createDataFrame([("a", 1, 0, "lo", None)], LEVEL_DDL)
    for asof in AS_OF_RULES:
        df = spec_joins(resolve(click_spec(asof)), ev, dim, "asof-join")
        assert "SortMergeAsOfJoin" in df._jdf.queryExecution().executedPlan().toString()
        assert df.collect()[0]["level"] == 0
    with pytest.raises(ValueError, match="unknown as-of method"):
        spec_joins(resolve(click_spec()), ev, dim, "range")


# --- the Spark twins of the pure rules ------------------------------------------------------

stamps = st.one_of(st.none(), st.just(-1), st.integers(0, 20))


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(st.tuples(st.integers(0, 30), stamps), min_size=1, max_size=30),
    now=st.integers(0, 20),
    tolerance=st.integers(0, 5),
)
def test_the_future_rule_in_spark_is_the_pure_rule(spark, rows, now, tolerance):
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows, "at bigint, _timestamp bigint")
    got = [
        (r["at"], r["_timestamp"], r["refused"])
        for r in df.select(
            "at",
            "_timestamp",
            future_column(F.col("at"), F.col("_timestamp"), now, tolerance).alias("refused"),
        ).collect()
    ]
    assert got == [
        (t, ts, from_the_future(t, kafka_timestamp(ts), now, tolerance)) for t, ts in rows
    ]


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ts=st.lists(st.integers(0, 30), min_size=1, max_size=20),
    start=st.one_of(st.none(), st.integers(0, 15)),
    length=st.integers(1, 15),
)
def test_the_range_filters_in_spark_are_the_pure_rule(spark, ts, start, length):
    r = EventRange(start, None if start is None else start + length)
    df = spark.createDataFrame([(t,) for t in ts], "at bigint")
    for role in ("events", "dimension-before", "dimension-earliest", "output"):
        got = sorted(row["at"] for row in in_range(df, r, role, "at").collect())
        assert got == sorted(t for t in ts if needs(r, role, t)), role


def test_reconcile_knows_a_held_join_is_not_missing(spark):
    """A bounded hold may still hold an event when the inputs end: reconcile calls it ``held``
    (no difference) when no version answers it and it is within ``hold_ms`` of their end."""
    from pyspark.sql import functions as F

    from app.batch.spec_joins import compare_joins, holding_ids, revision_columns

    spec = resolve({**click_spec(), "hold_ms": 100})
    ev = spark.createDataFrame(
        [
            ("c1", "u1", 1000, 1.0, True, None, None),
            ("c2", "u1", 5000, 1.0, True, None, None),  # answered: u1@10
            ("c3", "u2", 4950, 1.0, True, None, None),
        ],  # u2: no level
        EVENT_DDL,
    )
    dim = spark.createDataFrame([("u1", 10, 1, "a", None)], LEVEL_DDL)
    exact = spec_joins(spec, ev, dim)
    # the log has c1 only
    latest = exact.where(F.col("id") == "c1").select(
        *[
            F.col(c)
            if c in exact.columns
            else F.lit(1).alias(c)
            if c == "revision"
            else F.lit("arrival").alias(c)
            if c == "cause"
            else F.lit(None).cast("string").alias(c)
            for c in revision_columns(spec)
        ]
    )
    holding = holding_ids(spec, ev, dim)
    assert sorted(r["id"] for r in holding.collect()) == ["c2", "c3"]
    status = {r["id"]: r["status"] for r in compare_joins(spec, exact, latest, holding).collect()}
    assert status == {"c1": "matched", "c2": "missing", "c3": "held"}
    without = {r["id"]: r["status"] for r in compare_joins(spec, exact, latest).collect()}
    assert without["c3"] == "missing"


def test_an_archive_s_ends_reach_the_exact_answer_and_a_bad_end_is_dropped(spark, tmp_path):
    """A dimension archive with tombstones as the ``archive`` command writes them (end rows:
    the key and time, ``_end`` true): read and checked like the worker's, joined as ends."""
    import json

    from app.batch.archives import read_archive
    from app.batch.jobs import spec_kinds

    spec = resolve(click_spec())
    kinds = spec_kinds(spec)
    assert kinds.dimension.ends == ("user", "at")
    levels = tmp_path / "levels.jsonl"
    rows = [
        {"user": "ann", "at": 1, "level": 1, "label": "lo", "_timestamp": 1},
        {"user": "ann", "at": 5, "_end": True, "_timestamp": 5},  # ann's level ends at 5
        {"user": "ann", "at": 8, "level": 2, "label": "hi", "_timestamp": 8},
        {"at": 3, "_end": True},  # no key: dropped, as the worker dead-letters it
        {"user": "bob", "at": 2, "level": 1, "_timestamp": 2},  # no label: dropped
    ]
    levels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dim = read_archive(spark, str(levels), kinds.dimension)
    assert sorted((r["user"], r["at"], r["_end"]) for r in dim.collect()) == [
        ("ann", 1, False),
        ("ann", 5, True),
        ("ann", 8, False),
    ]
    clicks = [Click("ann", t, 1.0, True, None, f"c{t}") for t in (3, 6, 9)]
    ev = spark.createDataFrame([c.row() for c in clicks], EVENT_DDL)
    expected = exact_answer(
        spec.rules, [("ann", [1, 1, "lo"]), ("ann", [5]), ("ann", [8, 2, "hi"])], clicks
    )
    assert [expected[f"c{t}"][4] for t in (3, 6, 9)] == [(1, "lo"), None, (2, "hi")]
    for method in METHODS:
        assert answers(spec_joins(spec, ev, dim, method).collect()) == expected, method


def test_reconcile_of_an_inner_spec_reads_a_null_answer_as_a_retraction(spark):
    """An end took the answer of an emitted ``inner`` join: the log's latest revision is null,
    the exact answer has no join: the same (matched by absence), not an ``extra``."""
    from pyspark.sql import functions as F

    from app.batch.spec_joins import compare_joins, revision_columns

    spec = resolve(click_spec(mode="inner"))
    ev = spark.createDataFrame([Click("ann", 6, 1.0, True, None, "c6").row()], EVENT_DDL)
    dim = spark.createDataFrame(
        [("ann", 1, 1, "lo", None, False), ("ann", 5, None, None, None, True)], ENDED_DDL
    )
    exact = spec_joins(spec, ev, dim)
    assert exact.count() == 0  # ann's level ended at 5: no answer, no join
    retracted = spark.createDataFrame(
        [("c6", "ann", 6, 1.0, True, None, None, None, None, 2, 1, "lo", "late-dimension")],
        ", ".join(
            f"{c} {t}"
            for c, t in zip(
                revision_columns(spec),
                [
                    "string",
                    "string",
                    "bigint",
                    "double",
                    "boolean",
                    "string",
                    "bigint",
                    "string",
                    "bigint",
                    "bigint",
                    "bigint",
                    "string",
                    "string",
                ],
            )
        ),
    )
    assert compare_joins(spec, exact, retracted).where(F.col("status") != "matched").count() == 0


def test_backfill_of_an_inner_spec_retracts_a_join_an_end_took(spark):
    """The log still says ann's click joined level 1 (the stream never saw the end at 5): the
    exact answer has no join, so backfill sends the retraction, a null answer numbered 2; a
    join whose event the archive lacks is left alone."""
    from app.batch.spec_joins import compare_joins, retractions, revision_columns

    spec = resolve(click_spec(mode="inner"))
    ev = spark.createDataFrame([Click("ann", 6, 1.0, True, None, "c6").row()], EVENT_DDL)
    dim = spark.createDataFrame(
        [("ann", 1, 1, "lo", None, False), ("ann", 5, None, None, None, True)], ENDED_DDL
    )
    kinds = [
        "string", "string", "bigint", "double", "boolean", "string",
        "bigint", "string", "bigint", "bigint", "bigint", "string", "string",
    ]  # fmt: skip
    ddl = ", ".join(f"{c} {t}" for c, t in zip(revision_columns(spec), kinds))
    log = spark.createDataFrame(
        [
            ("c6", "ann", 6, 1.0, True, None, 1, "lo", 1, 1, None, None, "arrival"),
            ("gone", "bob", 6, 1.0, True, None, 1, "lo", 1, 1, None, None, "arrival"),
        ],
        ddl,
    )
    comparison = compare_joins(spec, spec_joins(spec, ev, dim), log)
    [row] = retractions(spec, comparison, ev).collect()
    assert row.asDict() == {
        "id": "c6",
        "user": "ann",
        "at": 6,
        "score": 1.0,
        "flag": True,
        "note": None,
        "level": None,
        "label": None,
        "level_at": None,
        "revision": 2,
        "previous_level": 1,
        "previous_label": "lo",
        "cause": "backfill",
    }


PRICED_DDL = "id string, customer string, product string, at bigint, tier string, revision bigint"
PRICE_DDL = "product string, price bigint, at bigint"


@pytest.mark.parametrize("mode", MODES)
def test_a_join_fed_by_a_join_keeps_each_id_highest_revision(spark, mode):
    """A join fed by another's revision log (app.joins.chains): an id's revisions, in any
    order and repeated, are one event, its highest revision's (the stream ignores a lower one
    after it); the others are what an oracle of the highest revisions says."""
    from app.joins.resolve import resolve_all
    from tests.oracle import Event
    from tests.unit.test_chains import chain

    raws = chain()
    raws[1]["mode"] = mode
    priced = resolve_all(raws)[1]
    # (id, customer, product, at, tier, revision): o1's revision 1 comes again after 3, and
    # the highest revisions' tiers are not the greatest
    revisions = [
        ("o1", "c1", "p1", 5, None, 1),
        ("o1", "c1", "p1", 5, "basic", 3),
        ("o1", "c1", "p1", 5, "gold", 2),
        ("o1", "c1", "p1", 5, None, 1),
        ("o2", "c2", "p2", 1, "basic", 1),
        ("o3", "c1", "p1", 9, "basic", 2),
        ("o3", "c1", "p1", 9, "basic", 2),
        ("o3", "c1", "p1", 9, "gold", 1),
    ]
    prices = [("p1", 12, 0), ("p1", 15, 7), ("p2", 3, 4)]
    latest: dict[str, tuple[Any, ...]] = {}
    for r in revisions:
        if r[0] not in latest or r[5] > latest[r[0]][5]:
            latest[r[0]] = r
    expected = exact_answer(
        priced.rules,
        [(p, [at, price]) for p, price, at in prices],
        [Event(p, i, at, (c, tier)) for i, c, p, at, tier, _ in latest.values()],
    )
    # revision 3's tier: neither the last record's (1) nor the greatest (gold, 2)
    assert expected["o1"][3:5] == (("c1", "basic"), (12,))
    assert ("o2" in expected) == (mode == "left")  # no price before it
    ev = spark.createDataFrame(revisions, PRICED_DDL)
    dim = spark.createDataFrame(prices, PRICE_DDL)
    for method in METHODS:
        got = {
            r["id"]: (
                r["id"],
                r["product"],
                r["at"],
                (r["customer"], r["tier"]),
                None if r["price_time"] is None else (r["price"],),
                r["price_time"],
            )
            for r in spec_joins(priced, ev, dim, method).collect()
        }
        assert got == expected, (method, got, expected)

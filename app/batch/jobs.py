"""The three batch jobs, each extract (archives) -> transform (pure) -> load.

- ``exact``: the exact mood joins (and car view) over archives of the inputs.
- ``reconcile``: the stream's output archive against the exact answer: a :class:`Report`.
- ``backfill``: the revisions that move the output log onto the exact answer once a late batch
  is known; the command line publishes them (see :mod:`app.batch.publish`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.batch import archives as A
from app.batch.car_view import CAR_COLUMNS, car_view, compare_car_views, latest_car_outputs
from app.batch.mood_joins import (
    JOIN_COLUMNS,
    REVISION_COLUMNS,
    backfill_revisions,
    compare_joins,
    latest_revisions,
    mood_joins,
)
from app.batch.session import Steps

Paths = Sequence[str]
STATUSES = ("matched", "wrong", "missing", "extra")


def read_mood_inputs(spark: SparkSession, moods: Paths, events: Paths,
                     ) -> tuple[DataFrame, DataFrame]:
    return A.read_archive(spark, moods, A.MOODS), A.read_archive(spark, events, A.EVENTS)


def exact_moods(spark: SparkSession, moods: Paths, events: Paths) -> DataFrame:
    """Extract + transform: the exact answer (:data:`JOIN_COLUMNS`) from input archives."""
    return mood_joins(*read_mood_inputs(spark, moods, events))


def exact_cars(spark: SparkSession, cars: Paths, zones: Paths) -> DataFrame:
    return car_view(A.read_archive(spark, cars, A.CARS), A.read_archive(spark, zones, A.ZONES))


# ---------------------------------------------------------------------------------- reconcile


@dataclass
class Report:
    """What ``reconcile`` found for one output: counts, examples, and contract notes."""

    title: str
    counts: dict[str, int]
    records: int  # records in the output archive
    examples: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # revision-log contract breaches

    @property
    def differences(self) -> int:
        return sum(self.counts.get(s, 0) for s in STATUSES[1:]) + len(self.problems)

    def render(self) -> str:
        c = self.counts
        expected = c.get("matched", 0) + c.get("wrong", 0) + c.get("missing", 0)
        lines = [f"== {self.title}",
                 f"   exact answer: {expected} · output archive: {self.records} records",
                 "   " + "  ".join(f"{s} {c.get(s, 0)}" for s in STATUSES)]
        lines += [f"   {e}" for e in self.examples]
        lines += [f"   PROBLEM {p}" for p in self.problems]
        lines.append("   OK: the output equals the exact answer" if not self.differences
                     else f"   DIFFERENT: {self.differences} difference(s)")
        return "\n".join(lines)


def _counts(comparison: DataFrame) -> dict[str, int]:
    return {r["status"]: r["count"] for r in comparison.groupBy("status").count().collect()}


def _examples(comparison: DataFrame, key: str, per_status: int) -> list[Any]:
    """Up to ``per_status`` rows of each non-matching status, in key order (one Spark job)."""
    from pyspark.sql import Window

    w = Window.partitionBy("status").orderBy(key)
    return (comparison.where(F.col("status") != "matched")
            .withColumn("_n", F.row_number().over(w)).where(F.col("_n") <= per_status)
            .orderBy("status", key).collect())


def _mood(m: Any, t: Any) -> str:
    return "null" if m is None else f"{m!r}@{t}"


def describe_join(row: Any) -> str:
    e, a = row["expected"], row["actual"]
    head = e if e is not None else a
    what = (f"{row['status']:<7} {row['id']} ({head['consultant']}, t={head['event_time']}, "
            f"{head['recommendation']!r}): ")
    if row["status"] == "missing":
        return what + f"expected mood {_mood(e['mood'], e['mood_event_time'])}, no revision"
    said = (f"revision {a['revision']} [{a['cause']}] says "
            f"{_mood(a['mood'], a['mood_event_time'])}")
    if row["status"] == "extra":
        return what + said + ", but no such recommendation in the inputs"
    diff = [c for c in JOIN_COLUMNS[1:] if e[c] != a[c] and c not in ("mood", "mood_event_time")]
    extra = f" (also differs: {', '.join(diff)})" if diff else ""
    return what + f"expected mood {_mood(e['mood'], e['mood_event_time'])}, {said}{extra}"


def reconcile_moods(spark: SparkSession, steps: Steps, moods: Paths, events: Paths,
                    revisions: Paths, examples: int = 5) -> Report:
    """The stream's revision log (archived) against the exact answer."""
    with steps.step("mood joins: reading archives, exact answer, latest revision per id"):
        log = A.read_archive(spark, revisions, A.REVISIONS).cache()
        comparison = compare_joins(exact_moods(spark, moods, events),
                                   latest_revisions(log)).cache()
        counts = _counts(comparison)
    with steps.step("mood joins: examples and revision-log checks"):
        shown = [describe_join(r) for r in _examples(comparison, "id", examples)]
        problems = _revision_log_problems(log, examples)
        records = log.count()
    comparison.unpersist()
    log.unpersist()
    return Report("mood joins (etj-mood-recommendations)", counts, records, shown, problems)


def _revision_log_problems(log: DataFrame, examples: int) -> list[str]:
    """DESIGN §2: one revision number never carries two different answers."""
    answer = F.struct(*JOIN_COLUMNS[1:], "previous_mood")
    clashes = (log.groupBy("id", "revision")
               .agg(F.count_distinct(F.to_json(answer)).alias("answers"))
               .where(F.col("answers") > 1).orderBy("id", "revision"))
    return [f"join {r['id']} has {r['answers']} different answers under revision "
            f"{r['revision']}" for r in clashes.limit(examples).collect()]


def describe_car(row: Any) -> str:
    e, a = row["expected"], row["actual"]

    def view(v: Any) -> str:
        return (f"zone {v['zone_id']} (car t={v['car_event_time']}), fuel {v['fuel_level']}, "
                f"pollution {v['pollution_level']} (zone t={v['zone_event_time']})")

    what = f"{row['status']:<7} car {row['car_id']}: "
    if row["status"] == "missing":
        return what + "expected " + view(e) + ", no output"
    if row["status"] == "extra":
        return what + "output " + view(a) + ", but the car never arrived in the inputs"
    return what + "expected " + view(e) + "; latest output " + view(a)


def reconcile_cars(spark: SparkSession, steps: Steps, cars: Paths, zones: Paths,
                   outputs: Paths, examples: int = 5) -> Report:
    """The stream's car view (archived) against the exact view."""
    with steps.step("car view: reading archives, exact view, latest output per car"):
        out = A.read_archive(spark, outputs, A.CAR_POLLUTION).cache()
        comparison = compare_car_views(exact_cars(spark, cars, zones),
                                       latest_car_outputs(out)).cache()
        counts = _counts(comparison)
        shown = [describe_car(r) for r in _examples(comparison, "car_id", examples)]
        records = out.count()
    comparison.unpersist()
    out.unpersist()
    return Report("car view (etj-car-pollution)", counts, records, shown)


# ----------------------------------------------------------------------------------- backfill


def backfill(spark: SparkSession, moods: Paths, events: Paths, revisions: Paths,
             late_moods: Paths = (), late_events: Paths = (), before: int | None = None,
             ) -> DataFrame:
    """Revisions (:data:`REVISION_COLUMNS`) that supersede the archived log's latest answers.

    ``revisions``: the output archive(s), plus the ledger of earlier backfills if kept — either
    way a second run finds the answers already exact and returns nothing. ``before``: only
    joins with event_time < before (e.g. the stream's horizon, where it no longer revises).
    """
    m, e = read_mood_inputs(spark, [*moods, *late_moods], [*events, *late_events])
    comparison = compare_joins(mood_joins(m, e),
                               latest_revisions(A.read_archive(spark, revisions, A.REVISIONS)))
    out = backfill_revisions(comparison)
    if before is not None:
        out = out.where(F.col("event_time") < before)
    return out.select(*REVISION_COLUMNS)


def rows_as_wire(df: DataFrame) -> list[dict[str, Any]]:
    """Collect (ordered by id) as wire-contract dicts, nulls kept."""
    return [r.asDict() for r in df.orderBy(df.columns[0]).toLocalIterator()]


__all__ = ["Report", "exact_moods", "exact_cars", "reconcile_moods", "reconcile_cars",
           "backfill", "rows_as_wire", "CAR_COLUMNS"]

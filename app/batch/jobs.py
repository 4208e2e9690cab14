"""The three batch jobs, each extract (archives) -> transform (pure) -> load.

- ``exact``: the exact mood joins (and car view) over archives of the inputs.
- ``reconcile``: the stream's output archive against the exact answer: a :class:`Report`.
- ``backfill``: the revisions that move the output log onto the exact answer once a late batch
  is known; the command line publishes them (see :mod:`app.batch.publish`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.batch import archives as A
from app.batch.car_view import CAR_COLUMNS, car_view, compare_car_views, latest_car_outputs
from app.batch.mood_joins import (
    JOIN_COLUMNS,
    METHODS,
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


def exact_moods(spark: SparkSession, moods: Paths, events: Paths,
                method: str = METHODS[0]) -> DataFrame:
    """Extract + transform: the exact answer (:data:`JOIN_COLUMNS`) from input archives."""
    return mood_joins(*read_mood_inputs(spark, moods, events), method=method)


def exact_cars(spark: SparkSession, cars: Paths, zones: Paths) -> DataFrame:
    return car_view(A.read_archive(spark, cars, A.CARS), A.read_archive(spark, zones, A.ZONES))


# ---------------------------------------------------------------------------------- reconcile


@dataclass
class Report:
    """What ``reconcile`` found for one output: counts, examples, and contract notes.

    ``differences_sample``: up to a bound per kind, each difference as a dict (``status``, the
    key, ``stream``: what the consumer ends on, ``exact``: the exact answer, ``fields``: which
    fields differ) -- what :func:`write_report` writes as JSON lines.
    """

    title: str
    counts: dict[str, int]
    records: int  # records in the output archive
    examples: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # revision-log contract breaches
    differences_sample: list[dict[str, Any]] = field(default_factory=list)
    view: str = ""  # "mood_joins" / "car_view"

    @property
    def differences(self) -> int:
        return sum(self.counts.get(s, 0) for s in STATUSES[1:]) + len(self.problems)

    @property
    def converged(self) -> bool:
        return not self.differences

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

    def summary(self) -> dict[str, Any]:
        """The report's first JSON line: counts per kind, and whether the view converged."""
        return {"kind": "summary", "view": self.view, "title": self.title,
                "converged": self.converged, "differences": self.differences,
                "counts": {s: self.counts.get(s, 0) for s in STATUSES},
                "output_records": self.records, "problems": self.problems,
                "sampled": len(self.differences_sample)}


def write_report(path: str | Path, reports: Iterable[Report]) -> int:
    """Load: per view, its summary line then its sampled differences (JSON lines).

    Returns the number of lines written. Each difference line is ``{"kind": "difference",
    "view", "status", <key>, "stream", "exact", "fields"}``; ``stream`` is null for a missing
    join, ``exact`` for an extra one.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with target.open("w", encoding="utf-8") as f:
        for report in reports:
            for line in [report.summary(), *({"kind": "difference", "view": report.view, **d}
                                             for d in report.differences_sample)]:
                f.write(json.dumps(line, default=str) + "\n")
                n += 1
    return n


def _counts(comparison: DataFrame) -> dict[str, int]:
    return {r["status"]: r["count"] for r in comparison.groupBy("status").count().collect()}


def _examples(comparison: DataFrame, key: str, per_status: int) -> list[Any]:
    """Up to ``per_status`` rows of each non-matching status, in key order (one Spark job)."""
    from pyspark.sql import Window

    if per_status <= 0:
        return []
    w = Window.partitionBy("status").orderBy(key)
    return (comparison.where(F.col("status") != "matched")
            .withColumn("_n", F.row_number().over(w)).where(F.col("_n") <= per_status)
            .orderBy("status", key).collect())


def _as_dict(value: Any) -> dict[str, Any] | None:
    return None if value is None else value.asDict(recursive=True)


def difference(row: Any, key: str, compared: Sequence[str]) -> dict[str, Any]:
    """One non-matching comparison row as a JSON-able dict (see :class:`Report`)."""
    e, a = _as_dict(row["expected"]), _as_dict(row["actual"])
    fields = ([c for c in compared if e[c] != a[c]] if e is not None and a is not None
              else [])
    return {"status": row["status"], key: row[key], "stream": a, "exact": e, "fields": fields}


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
                    revisions: Paths, examples: int = 5, sample: int = 0,
                    method: str = METHODS[0]) -> Report:
    """The stream's revision log (archived) against the exact answer.

    ``examples`` per kind are described in the text; ``sample`` per kind (at least
    ``examples``) are kept as dicts for the JSON lines report.
    """
    with steps.step("mood joins: reading archives, exact answer, latest revision per id"):
        log = A.read_archive(spark, revisions, A.REVISIONS).cache()
        comparison = compare_joins(exact_moods(spark, moods, events, method),
                                   latest_revisions(log)).cache()
        counts = _counts(comparison)
    with steps.step("mood joins: examples and revision-log checks"):
        rows = _examples(comparison, "id", max(examples, sample))
        shown = [describe_join(r) for r in _first_per_status(rows, examples)]
        diffs = [difference(r, "id", JOIN_COLUMNS[1:]) for r in rows]
        problems = _revision_log_problems(log, examples)
        records = log.count()
    comparison.unpersist()
    log.unpersist()
    return Report("mood joins (etj-mood-recommendations)", counts, records, shown, problems,
                  diffs, "mood_joins")


def _first_per_status(rows: Sequence[Any], n: int) -> list[Any]:
    seen: dict[str, int] = {}
    out = []
    for r in rows:
        seen[r["status"]] = seen.get(r["status"], 0) + 1
        if seen[r["status"]] <= n:
            out.append(r)
    return out


def _revision_log_problems(log: DataFrame, examples: int) -> list[str]:
    """The revision-log contract: one revision number never carries two different answers."""
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
                   outputs: Paths, examples: int = 5, sample: int = 0) -> Report:
    """The stream's car view (archived) against the exact view."""
    with steps.step("car view: reading archives, exact view, latest output per car"):
        out = A.read_archive(spark, outputs, A.CAR_POLLUTION).cache()
        comparison = compare_car_views(exact_cars(spark, cars, zones),
                                       latest_car_outputs(out)).cache()
        counts = _counts(comparison)
        rows = _examples(comparison, "car_id", max(examples, sample))
        shown = [describe_car(r) for r in _first_per_status(rows, examples)]
        diffs = [difference(r, "car_id", CAR_COLUMNS[1:]) for r in rows]
        records = out.count()
    comparison.unpersist()
    out.unpersist()
    return Report("car view (etj-car-pollution)", counts, records, shown, [], diffs,
                  "car_view")


# ----------------------------------------------------------------------------------- backfill


def backfill(spark: SparkSession, moods: Paths, events: Paths, revisions: Paths,
             late_moods: Paths = (), late_events: Paths = (), before: int | None = None,
             method: str = METHODS[0]) -> DataFrame:
    """Revisions (:data:`REVISION_COLUMNS`) that supersede the archived log's latest answers.

    ``revisions``: the output archive(s), plus the ledger of earlier backfills if kept — either
    way a second run finds the answers already exact and returns nothing. ``before``: only
    joins with event_time < before (e.g. the stream's horizon, where it no longer revises).
    """
    m, e = read_mood_inputs(spark, [*moods, *late_moods], [*events, *late_events])
    comparison = compare_joins(mood_joins(m, e, method),
                               latest_revisions(A.read_archive(spark, revisions, A.REVISIONS)))
    out = backfill_revisions(comparison)
    if before is not None:
        out = out.where(F.col("event_time") < before)
    return out.select(*REVISION_COLUMNS)


def rows_as_wire(df: DataFrame) -> list[dict[str, Any]]:
    """Collect (ordered by id) as wire-contract dicts, nulls kept."""
    return [r.asDict() for r in df.orderBy(df.columns[0]).toLocalIterator()]


__all__ = ["Report", "write_report", "difference", "exact_moods", "exact_cars",
           "reconcile_moods", "reconcile_cars",
           "backfill", "rows_as_wire", "CAR_COLUMNS"]

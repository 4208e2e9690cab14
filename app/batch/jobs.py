"""The three batch jobs, each extract (archives) -> transform (pure) -> load.

- ``exact``: the exact answer of a join (any spec: :mod:`app.batch.spec_joins`; and the car
  view) over archives of its inputs.
- ``reconcile``: the stream's output archive against the exact answer: a :class:`Report`.
- ``backfill``: the revisions that move the output log onto the exact answer once a late batch
  is known; the command line publishes them (see :mod:`app.batch.publish`).

Every job first admits its inputs as the stream does (:mod:`app.batch.admission`): records
from the future are refused and counted (:mod:`app.logic.future`), and with an event-time
range only what the joins of events in the range need is read (:mod:`app.logic.event_range`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.batch import archives as A
from app.batch import spec_joins as S
from app.batch.admission import admit, in_range
from app.batch.car_view import CAR_COLUMNS, car_view, compare_car_views, latest_car_outputs
from app.batch.session import Steps
from app.batch.spec_joins import METHODS
from app.joins.columns import model_columns, output_columns
from app.joins.spec import JoinSpec
from app.logic.event_range import EventRange, Role

Paths = Sequence[str]
STATUSES = ("matched", "wrong", "missing", "extra")


@dataclass(frozen=True)
class Scope:
    """What a run admits: the wall clock and tolerance of the rule on records from the future
    (``now_ms``: when the run started, or ``--now``), and the event-time range."""

    now_ms: int
    max_future_ms: int
    range: EventRange = EventRange()


@dataclass(frozen=True)
class SpecKinds:
    """How a spec's archives are read and validated: the same fields and checks as its wire
    models (:mod:`app.joins.columns`)."""

    events: A.ArchiveKind
    dimension: A.ArchiveKind
    output: A.ArchiveKind


def spec_kinds(spec: JoinSpec) -> SpecKinds:
    return SpecKinds(A.kind_of(spec.events.topic, model_columns(spec.events.model)),
                     A.kind_of(spec.dimension.topic, model_columns(spec.dimension.model)),
                     A.kind_of(spec.output, output_columns(spec), unwrap=False))


def dimension_role(spec: JoinSpec) -> Role:
    return "dimension-before" if spec.asof == "before" else "dimension-earliest"


@dataclass
class JoinInputs:
    """A join's admitted inputs, and what the future rule refused of each (lazy frames)."""

    events: DataFrame
    dimension: DataFrame
    refused: dict[str, DataFrame] = field(default_factory=dict)

    def refused_counts(self) -> dict[str, int]:
        """Records refused as from the future, per input (runs one Spark job per input)."""
        return {name: df.count() for name, df in self.refused.items()}


def read_join_inputs(spark: SparkSession, spec: JoinSpec, events: Paths, dimension: Paths,
                     scope: Scope) -> JoinInputs:
    """Extract and admit: the archives read as the spec's records, records from the future set
    apart, and only what the range needs kept."""
    kinds = spec_kinds(spec)
    ev = admit(A.read_archive(spark, events, kinds.events), spec.events.time, scope.now_ms,
               scope.max_future_ms)
    dv = admit(A.read_archive(spark, dimension, kinds.dimension), spec.dimension.time,
               scope.now_ms, scope.max_future_ms)
    r, role = scope.range, dimension_role(spec)
    return JoinInputs(
        in_range(ev.records, r, "events", spec.events.time),
        in_range(dv.records, r, role, spec.dimension.time),
        {"events": in_range(ev.refused, r, "events", spec.events.time),
         "dimension": in_range(dv.refused, r, role, spec.dimension.time)})


def exact_join(spark: SparkSession, spec: JoinSpec, events: Paths, dimension: Paths,
               scope: Scope, method: str = METHODS[0]) -> tuple[DataFrame, JoinInputs]:
    """Extract + transform: the exact answer (:func:`app.batch.spec_joins.answer_columns`)."""
    inputs = read_join_inputs(spark, spec, events, dimension, scope)
    return S.spec_joins(spec, inputs.events, inputs.dimension, method), inputs


@dataclass
class CarInputs:
    arrivals: DataFrame
    zones: DataFrame
    refused: dict[str, DataFrame] = field(default_factory=dict)

    def refused_counts(self) -> dict[str, int]:
        return {name: df.count() for name, df in self.refused.items()}


def read_car_inputs(spark: SparkSession, cars: Paths, zones: Paths, scope: Scope) -> CarInputs:
    """The car view's inputs, records from the future set apart (the car view is the view of
    now: no event-time range applies)."""
    a = admit(A.read_archive(spark, cars, A.CARS), "event_time", scope.now_ms,
              scope.max_future_ms)
    z = admit(A.read_archive(spark, zones, A.ZONES), "event_time", scope.now_ms,
              scope.max_future_ms)
    return CarInputs(a.records, z.records, {"car arrivals": a.refused, "zones": z.refused})


def exact_cars(spark: SparkSession, cars: Paths, zones: Paths, scope: Scope,
               ) -> tuple[DataFrame, CarInputs]:
    inputs = read_car_inputs(spark, cars, zones, scope)
    return car_view(inputs.arrivals, inputs.zones), inputs


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
    view: str = ""  # "mood_joins" / "car_view" / "joins:<spec name>"
    #: input -> records refused as from the future (not part of the exact answer)
    refused: dict[str, int] = field(default_factory=dict)

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
        if any(self.refused.values()):
            lines.append("   refused as from the future (not joined): " + ", ".join(
                f"{name} {n}" for name, n in self.refused.items()))
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
                "refused_future": self.refused,
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


def _answer(values: Sequence[Any], t: Any) -> str:
    if t is None:
        return "null"
    shown = repr(values[0]) if len(values) == 1 else repr(tuple(values))
    return f"{shown}@{t}"


def describe_join(spec: JoinSpec, row: Any) -> str:
    """One difference as a line, e.g. ``wrong   r7 (c, t=31, 'item3'): expected mood
    'sad'@29, revision 2 [late-dimension] says 'furious'@29``."""
    e, a = row["expected"], row["actual"]
    head = e if e is not None else a
    dims, label = spec.dimension.copy, ", ".join(spec.dimension.copy)

    def said(v: Any) -> str:
        return _answer([v[f] for f in dims], v[spec.time_as])

    event = [repr(head[f]) if f != spec.events.key else str(head[f])
             for f in spec.events.copy if f != spec.events.time]
    if spec.events.time in spec.events.copy:
        event.insert(1 if spec.events.key in spec.events.copy else 0,
                     f"t={head[spec.events.time]}")
    what = f"{row['status']:<7} {row['id']} ({', '.join(event)}): "
    if row["status"] == "missing":
        return what + f"expected {label} {said(e)}, no revision"
    says = f"revision {a['revision']} [{a['cause']}] says {said(a)}"
    if row["status"] == "extra":
        return what + says + ", but no such event in the inputs"
    diff = [c for c in S.answer_columns(spec)[1:]
            if e[c] != a[c] and c not in (*dims, spec.time_as)]
    extra = f" (also differs: {', '.join(diff)})" if diff else ""
    return what + f"expected {label} {said(e)}, {says}{extra}"


def _view(spec: JoinSpec) -> tuple[str, str]:
    """(title, view) of a join's report; the mood join keeps the names it had."""
    if spec.name == "moods":
        return f"mood joins ({spec.output})", "mood_joins"
    return f"join {spec.name} ({spec.output})", f"joins:{spec.name}"


def read_output(spark: SparkSession, spec: JoinSpec, revisions: Paths, scope: Scope,
                inputs: JoinInputs) -> DataFrame:
    """The output archive, as far as the range asks: the revisions of the joins of events in
    it (by the event time they carry, else by the join ids of those events)."""
    log = A.read_archive(spark, revisions, spec_kinds(spec).output)
    if not scope.range.bounded:
        return log
    if spec.events.time in spec.events.copy:
        return in_range(log, scope.range, "output", spec.events.time)
    ids = inputs.events.select(S.join_id(spec).alias("id")).distinct()
    return log.join(ids, "id", "left_semi")


def reconcile_join(spark: SparkSession, steps: Steps, spec: JoinSpec, events: Paths,
                   dimension: Paths, revisions: Paths, scope: Scope, examples: int = 5,
                   sample: int = 0, method: str = METHODS[0]) -> Report:
    """The stream's revision log (archived) against the exact answer, for any join spec.

    ``examples`` per kind are described in the text; ``sample`` per kind (at least
    ``examples``) are kept as dicts for the JSON lines report.
    """
    title, view = _view(spec)
    with steps.step(f"{spec.name}: reading archives, exact answer, latest revision per id"):
        exact, inputs = exact_join(spark, spec, events, dimension, scope, method)
        log = read_output(spark, spec, revisions, scope, inputs).cache()
        comparison = S.compare_joins(spec, exact, S.latest_revisions(spec, log)).cache()
        counts = _counts(comparison)
    with steps.step(f"{spec.name}: examples, revision-log checks, refused records"):
        rows = _examples(comparison, "id", max(examples, sample))
        shown = [describe_join(spec, r) for r in _first_per_status(rows, examples)]
        diffs = [difference(r, "id", S.answer_columns(spec)[1:]) for r in rows]
        problems = _revision_log_problems(spec, log, examples)
        records = log.count()
        refused = inputs.refused_counts()
    comparison.unpersist()
    log.unpersist()
    return Report(title, counts, records, shown, problems, diffs, view, refused)


def _first_per_status(rows: Sequence[Any], n: int) -> list[Any]:
    seen: dict[str, int] = {}
    out = []
    for r in rows:
        seen[r["status"]] = seen.get(r["status"], 0) + 1
        if seen[r["status"]] <= n:
            out.append(r)
    return out


def _revision_log_problems(spec: JoinSpec, log: DataFrame, examples: int) -> list[str]:
    """The revision-log contract: one revision number never carries two different answers."""
    answer = F.struct(*S.answer_columns(spec)[1:],
                      *[f"previous_{f}" for f in spec.dimension.copy])
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
                   outputs: Paths, scope: Scope, examples: int = 5, sample: int = 0) -> Report:
    """The stream's car view (archived) against the exact view."""
    with steps.step("car view: reading archives, exact view, latest output per car"):
        out = A.read_archive(spark, outputs, A.CAR_POLLUTION).cache()
        view, inputs = exact_cars(spark, cars, zones, scope)
        comparison = compare_car_views(view, latest_car_outputs(out)).cache()
        counts = _counts(comparison)
        rows = _examples(comparison, "car_id", max(examples, sample))
        shown = [describe_car(r) for r in _first_per_status(rows, examples)]
        diffs = [difference(r, "car_id", CAR_COLUMNS[1:]) for r in rows]
        records = out.count()
        refused = inputs.refused_counts()
    comparison.unpersist()
    out.unpersist()
    return Report("car view (etj-car-pollution)", counts, records, shown, [], diffs,
                  "car_view", refused)


# ----------------------------------------------------------------------------------- backfill


def backfill(spark: SparkSession, spec: JoinSpec, events: Paths, dimension: Paths,
             revisions: Paths, scope: Scope, late_events: Paths = (),
             late_dimension: Paths = (), before: int | None = None,
             method: str = METHODS[0]) -> tuple[DataFrame, JoinInputs]:
    """Revisions (:func:`app.batch.spec_joins.revision_columns`) that supersede the archived
    log's latest answers, and the admitted inputs (for their refused counts).

    ``revisions``: the output archive(s), plus the ledger of earlier backfills if kept — either
    way a second run finds the answers already exact and returns nothing. ``before``: only
    joins with event time < before (e.g. the stream's horizon, where it no longer revises);
    needs the spec to copy the event time into its output.
    """
    exact, inputs = exact_join(spark, spec, [*events, *late_events],
                               [*dimension, *late_dimension], scope, method)
    log = read_output(spark, spec, revisions, scope, inputs)
    out = S.backfill_revisions(spec, S.compare_joins(spec, exact,
                                                     S.latest_revisions(spec, log)))
    if before is not None:
        if spec.events.time not in spec.events.copy:
            raise ValueError(f"--before needs the event time in the output of join "
                             f"{spec.name!r}, which does not copy {spec.events.time!r}")
        out = out.where(F.col(spec.events.time) < before)
    return out.select(*S.revision_columns(spec)), inputs


def rows_as_wire(df: DataFrame) -> list[dict[str, Any]]:
    """Collect (ordered by id) as wire-contract dicts, nulls kept."""
    return [r.asDict() for r in df.orderBy(df.columns[0]).toLocalIterator()]


__all__ = ["Scope", "Report", "write_report", "difference", "exact_join", "exact_cars",
           "reconcile_join", "reconcile_cars", "backfill", "rows_as_wire", "spec_kinds",
           "CAR_COLUMNS"]

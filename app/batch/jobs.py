"""The three batch jobs, each extract (archives) -> transform (pure) -> load.

- ``exact``: the exact answer of a join (any spec: :mod:`app.batch.spec_joins`; and the car
  view) over archives of its inputs.
- ``reconcile``: the stream's output archive against the exact answer: a :class:`Report`.
- ``backfill``: the revisions that move the output log onto the exact answer once a late batch
  is known; the command line publishes them (see :mod:`app.batch.publish`).

Every job first admits its inputs as the stream does (:mod:`app.batch.admission`): records
from the future are refused and counted (:mod:`app.logic.future_records`), and with an event-time
range only what the joins of events in the range need is read (:mod:`app.logic.event_range`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.batch import archives as A
from app.batch import spec_joins as S
from app.batch.admission import admit, in_range
from app.batch.car_view import CAR_COLUMNS, car_view, compare_car_views, latest_car_outputs
from app.batch.report import (
    Report,
    count_statuses,
    describe_car,
    describe_join,
    difference,
    first_per_status,
    sample_rows,
    view_names,
    write_report,
)
from app.batch.session import Steps
from app.batch.spec_joins import METHODS
from app.joins.columns import model_columns, output_columns
from app.joins.spec import JoinSpec
from app.logic.event_range import EventRange, Role

Paths = Sequence[str]


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
    return SpecKinds(
        A.kind_of(spec.events.topic, model_columns(spec.events.model)),
        A.kind_of(
            spec.dimension.topic,
            model_columns(spec.dimension.model),
            ends=end_fields(spec),
        ),
        A.kind_of(spec.output, output_columns(spec), unwrap=False),
    )


def end_fields(spec: JoinSpec) -> tuple[str, ...]:
    """The fields of an end in the spec's dimension archive (a tombstone: its key fields and
    its time, app.commands.archive); none for a repartitioned dimension (it takes no ends)."""
    d = spec.dimension
    return () if d.repartition else (*d.key_parts, d.time)


def dimension_role(spec: JoinSpec) -> Role:
    return "dimension-before" if spec.asof == "before" else "dimension-earliest"


@dataclass
class Inputs:
    """A job's admitted inputs by name (``events``, ``dimension``; ``car arrivals``, ``zones``)
    and what the future rule refused of each: lazy frames."""

    records: dict[str, DataFrame]
    refused: dict[str, DataFrame]

    def __getitem__(self, name: str) -> DataFrame:
        return self.records[name]

    def refused_counts(self) -> dict[str, int]:
        """Records refused as from the future, per input (runs one Spark job per input)."""
        return {name: df.count() for name, df in self.refused.items()}


def admit_input(
    spark: SparkSession,
    paths: Paths,
    kind: A.ArchiveKind,
    time: str,
    scope: Scope,
    role: Role | None,
    max_future_ms: int | None = None,
) -> tuple[DataFrame, DataFrame]:
    """One input read, split by the future rule, both parts cut to what the range needs
    (``role`` None: no range applies). ``max_future_ms``: the side's own tolerance (a spec
    side's ``max_future_ms``), else the scope's (``ETJ_MAX_FUTURE_MS``)."""
    tolerance = scope.max_future_ms if max_future_ms is None else max_future_ms
    a = admit(A.read_archive(spark, paths, kind), time, scope.now_ms, tolerance)
    if role is None:
        return a.records, a.refused
    return (
        in_range(a.records, scope.range, role, time),
        in_range(a.refused, scope.range, role, time),
    )


def read_join_inputs(
    spark: SparkSession, spec: JoinSpec, events: Paths, dimension: Paths, scope: Scope
) -> Inputs:
    """Extract and admit: the archives read as the spec's records, records from the future set
    apart, and only what the range needs kept."""
    kinds = spec_kinds(spec)
    sides = {
        "events": admit_input(
            spark,
            events,
            kinds.events,
            spec.events.time,
            scope,
            "events",
            spec.events.max_future_ms,
        ),
        "dimension": admit_input(
            spark,
            dimension,
            kinds.dimension,
            spec.dimension.time,
            scope,
            dimension_role(spec),
            spec.dimension.max_future_ms,
        ),
    }
    return Inputs({k: v[0] for k, v in sides.items()}, {k: v[1] for k, v in sides.items()})


def exact_join(
    spark: SparkSession,
    spec: JoinSpec,
    events: Paths,
    dimension: Paths,
    scope: Scope,
    method: str = METHODS[0],
) -> tuple[DataFrame, Inputs]:
    """Extract + transform: the exact answer (:func:`app.batch.spec_joins.answer_columns`)."""
    inputs = read_join_inputs(spark, spec, events, dimension, scope)
    return S.spec_joins(spec, inputs["events"], inputs["dimension"], method), inputs


def read_car_inputs(spark: SparkSession, cars: Paths, zones: Paths, scope: Scope) -> Inputs:
    """The car view's inputs, records from the future set apart (the car view is the view of
    now: no event-time range applies)."""
    sides = {
        "car arrivals": admit_input(spark, cars, A.CARS, "event_time", scope, None),
        "zones": admit_input(spark, zones, A.ZONES, "event_time", scope, None),
    }
    return Inputs({k: v[0] for k, v in sides.items()}, {k: v[1] for k, v in sides.items()})


def exact_cars(
    spark: SparkSession,
    cars: Paths,
    zones: Paths,
    scope: Scope,
) -> tuple[DataFrame, Inputs]:
    inputs = read_car_inputs(spark, cars, zones, scope)
    return car_view(inputs["car arrivals"], inputs["zones"]), inputs


# ---------------------------------------------------------------------------------- reconcile


def read_output(
    spark: SparkSession, spec: JoinSpec, revisions: Paths, scope: Scope, inputs: Inputs
) -> DataFrame:
    """The output archive, as far as the range asks: the revisions of the joins of events in
    it (by the event time they carry, else by the join ids of those events)."""
    log = A.read_archive(spark, revisions, spec_kinds(spec).output)
    if not scope.range.bounded:
        return log
    if spec.events.time in spec.events.copy:
        return in_range(log, scope.range, "output", spec.events.time)
    ids = inputs["events"].select(S.join_id(spec).alias("id")).distinct()
    return log.join(ids, "id", "left_semi")


def reconcile_join(
    spark: SparkSession,
    steps: Steps,
    spec: JoinSpec,
    events: Paths,
    dimension: Paths,
    revisions: Paths,
    scope: Scope,
    examples: int = 5,
    sample: int = 0,
    method: str = METHODS[0],
) -> Report:
    """The stream's revision log (archived) against the exact answer, for any join spec.

    ``examples`` per kind are described in the text; ``sample`` per kind (at least
    ``examples``) are kept as dicts for the JSON lines report.
    """
    title, view = view_names(spec)
    with steps.step(f"{spec.name}: reading archives, exact answer, latest revision per id"):
        exact, inputs = exact_join(spark, spec, events, dimension, scope, method)
        log = read_output(spark, spec, revisions, scope, inputs).cache()
        holding = S.holding_ids(spec, inputs["events"], inputs["dimension"])
        comparison = S.compare_joins(spec, exact, S.latest_revisions(spec, log), holding).cache()
        counts = count_statuses(comparison)
    with steps.step(f"{spec.name}: examples, revision-log checks, refused records"):
        rows = sample_rows(comparison, "id", max(examples, sample))
        shown = [describe_join(spec, r) for r in first_per_status(rows, examples)]
        diffs = [difference(r, "id", S.answer_columns(spec)[1:]) for r in rows]
        problems = revision_log_problems(spec, log, examples)
        records = log.count()
        refused = inputs.refused_counts()
    comparison.unpersist()
    log.unpersist()
    return Report(title, counts, records, shown, problems, diffs, view, refused)


def revision_log_problems(spec: JoinSpec, log: DataFrame, examples: int) -> list[str]:
    """The revision-log contract: one revision number never carries two different answers."""
    answer = F.struct(*S.answer_columns(spec)[1:], *[f"previous_{f}" for f in spec.dimension.copy])
    clashes = (
        log.groupBy("id", "revision")
        .agg(F.count_distinct(F.to_json(answer)).alias("answers"))
        .where(F.col("answers") > 1)
        .orderBy("id", "revision")
    )
    return [
        f"join {r['id']} has {r['answers']} different answers under revision {r['revision']}"
        for r in clashes.limit(examples).collect()
    ]


def reconcile_cars(
    spark: SparkSession,
    steps: Steps,
    cars: Paths,
    zones: Paths,
    outputs: Paths,
    scope: Scope,
    examples: int = 5,
    sample: int = 0,
) -> Report:
    """The stream's car view (archived) against the exact view."""
    with steps.step("car view: reading archives, exact view, latest output per car"):
        out = A.read_archive(spark, outputs, A.CAR_POLLUTION).cache()
        view, inputs = exact_cars(spark, cars, zones, scope)
        comparison = compare_car_views(view, latest_car_outputs(out)).cache()
        counts = count_statuses(comparison)
        rows = sample_rows(comparison, "car_id", max(examples, sample))
        shown = [describe_car(r) for r in first_per_status(rows, examples)]
        diffs = [difference(r, "car_id", CAR_COLUMNS[1:]) for r in rows]
        records = out.count()
        refused = inputs.refused_counts()
    comparison.unpersist()
    out.unpersist()
    return Report(
        "car view (etj-car-pollution)", counts, records, shown, [], diffs, "car_view", refused
    )


# ----------------------------------------------------------------------------------- backfill


def backfill(
    spark: SparkSession,
    spec: JoinSpec,
    events: Paths,
    dimension: Paths,
    revisions: Paths,
    scope: Scope,
    late_events: Paths = (),
    late_dimension: Paths = (),
    before: int | None = None,
    method: str = METHODS[0],
) -> tuple[DataFrame, Inputs]:
    """Revisions (:func:`app.batch.spec_joins.revision_columns`) that supersede the archived
    log's latest answers, and the admitted inputs (for their refused counts).

    ``revisions``: the output archive(s), plus the ledger of earlier backfills if kept — either
    way a second run finds the answers already exact and returns nothing. ``before``: only
    joins with event time < before (e.g. the stream's horizon, where it no longer revises);
    needs the spec to copy the event time into its output.
    """
    exact, inputs = exact_join(
        spark, spec, [*events, *late_events], [*dimension, *late_dimension], scope, method
    )
    log = read_output(spark, spec, revisions, scope, inputs)
    comparison = S.compare_joins(spec, exact, S.latest_revisions(spec, log))
    out = S.backfill_revisions(spec, comparison)
    if spec.mode == "inner":  # a join an end took: its retraction (a null answer)
        out = out.unionByName(S.retractions(spec, comparison, inputs["events"]))
    if before is not None:
        if spec.events.time not in spec.events.copy:
            raise ValueError(
                f"--before needs the event time in the output of join "
                f"{spec.name!r}, which does not copy {spec.events.time!r}"
            )
        out = out.where(F.col(spec.events.time) < before)
    return out.select(*S.revision_columns(spec)), inputs


def rows_as_wire(df: DataFrame) -> list[dict[str, Any]]:
    """Collect (ordered by id) as wire-contract dicts, nulls kept."""
    return [r.asDict(recursive=True) for r in df.orderBy(df.columns[0]).toLocalIterator()]


def backfill_source(archives: Sequence[str]) -> dict[str, list[str]]:
    """What a backfill revision names as its cause (docs/concepts/revision-log.md#lineage): the
    archives the backfill read, where a stream revision names its input record."""
    return {"backfill": sorted(set(archives))}


def with_lineage(df: DataFrame, archives: Sequence[str]) -> DataFrame:
    """The backfill's revisions with their ``partition`` (null: a backfill is outside every
    finality promise, docs/concepts/guarantees.md) and ``source`` columns
    (:func:`backfill_source`), as a stream revision carries them: one DataFrame for what is
    written (``--out``) and what is published, so the two are equal."""
    names = backfill_source(archives)["backfill"]
    df = df.withColumn("partition", F.lit(None).cast("int"))
    return df.withColumn("source", F.struct(F.array(*[F.lit(a) for a in names]).alias("backfill")))


__all__ = [
    "Scope",
    "Report",
    "write_report",
    "difference",
    "exact_join",
    "exact_cars",
    "reconcile_join",
    "reconcile_cars",
    "backfill",
    "backfill_source",
    "rows_as_wire",
    "spec_kinds",
    "with_lineage",
    "CAR_COLUMNS",
]

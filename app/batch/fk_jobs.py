"""The batch jobs of a foreign-key join, each extract (archives) -> transform (pure) -> load:
``exact`` (the view), ``reconcile`` (the stream's output against it), ``backfill`` (the outputs
that move every consumer onto it). ``python -m app.batch <job> --join NAME --left ... --right
...`` (:mod:`app.batch.cli`).

Inputs are admitted as the stream admits them (records from the future are refused and
counted: :mod:`app.batch.admission`); the view is the view of now, so no event-time range
applies.

Backfill: a consumer keeps, per left key, the greatest output by
:func:`app.logic.fk_join.output_order`. The exact row of a key is its newest left version with
the newest right version, so it is not below any output the stream made of the same inputs:
published, it is what a consumer ends on. A key whose latest output already equals it gets
nothing (a second run publishes nothing).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.batch import archives as A
from app.batch.fk_view import compare_fk_views, fk_view, latest_fk_outputs, latest_left
from app.batch.jobs import Inputs, Paths, Scope, admit_input
from app.batch.report import Report, count_statuses, difference, first_per_status, sample_rows
from app.batch.session import Steps
from app.joins.columns import fk_output_columns, model_columns
from app.joins.fk_spec import FkJoinSpec

__all__ = ["backfill_fk", "describe_fk", "exact_fk", "fk_kinds", "reconcile_fk"]


def fk_kinds(spec: FkJoinSpec) -> tuple[A.ArchiveKind, A.ArchiveKind, A.ArchiveKind]:
    """How its archives are read: left, right, output (the checks of its wire models)."""
    lt, rt = spec.left, spec.right
    return (  # a tombstone: an end row of either side, a delete on the output
        A.kind_of(lt.topic, model_columns(lt.model), ends=(lt.key, lt.time)),
        A.kind_of(rt.topic, model_columns(rt.model), ends=(rt.key, rt.time)),
        A.kind_of(spec.output, fk_output_columns(spec), unwrap=False, deletes=True),
    )


def read_fk_inputs(
    spark: SparkSession, spec: FkJoinSpec, left: Paths, right: Paths, scope: Scope
) -> Inputs:
    kinds = fk_kinds(spec)
    sides = {
        "left": admit_input(spark, left, kinds[0], spec.left.time, scope, None),
        "right": admit_input(spark, right, kinds[1], spec.right.time, scope, None),
    }
    return Inputs({k: v[0] for k, v in sides.items()}, {k: v[1] for k, v in sides.items()})


def exact_fk(
    spark: SparkSession, spec: FkJoinSpec, left: Paths, right: Paths, scope: Scope
) -> tuple[DataFrame, Inputs]:
    """Extract + transform: the exact view (columns ``spec.output_fields``)."""
    inputs = read_fk_inputs(spark, spec, left, right, scope)
    return fk_view(spec, inputs["left"], inputs["right"]), inputs


def _comparison(
    spark: SparkSession, spec: FkJoinSpec, left: Paths, right: Paths, outputs: Paths, scope: Scope
) -> tuple[DataFrame, DataFrame, Inputs]:
    out = A.read_archive(spark, outputs, fk_kinds(spec)[2]).cache()
    view, inputs = exact_fk(spark, spec, left, right, scope)
    return compare_fk_views(spec, view, latest_fk_outputs(spec, out)), out, inputs


def describe_fk(spec: FkJoinSpec, row: Any) -> str:
    """One difference as a line: ``wrong   o7: expected {...}; latest output {...}``."""
    e, a = row["expected"], row["actual"]

    def view(v: Any) -> str:
        return ", ".join(f"{f} {v[f]!r}" for f in spec.output_fields[1:])

    what = f"{row['status']:<7} {spec.left.key} {row[spec.left.key]}: "
    if row["status"] == "missing":
        return what + "expected " + view(e) + ", no output"
    if row["status"] == "extra":
        return what + "output " + view(a) + ", but the key is in no left record"
    return what + "expected " + view(e) + "; latest output " + view(a)


def reconcile_fk(
    spark: SparkSession,
    steps: Steps,
    spec: FkJoinSpec,
    left: Paths,
    right: Paths,
    outputs: Paths,
    scope: Scope,
    examples: int = 5,
    sample: int = 0,
) -> Report:
    """The stream's output (archived) against the exact view."""
    key = spec.left.key
    with steps.step(f"{spec.name}: reading archives, exact view, latest output per key"):
        comparison, out, inputs = _comparison(spark, spec, left, right, outputs, scope)
        comparison = comparison.cache()
        counts = count_statuses(comparison)
        rows = sample_rows(comparison, key, max(examples, sample))
        shown = [describe_fk(spec, r) for r in first_per_status(rows, examples)]
        diffs = [difference(r, key, spec.output_fields[1:]) for r in rows]
        records = out.count()
        refused = inputs.refused_counts()
    comparison.unpersist()
    out.unpersist()
    return Report(
        f"join {spec.name} ({spec.output})",
        counts,
        records,
        shown,
        [],
        diffs,
        f"joins:{spec.name}",
        refused,
    )


def backfill_fk(
    spark: SparkSession, spec: FkJoinSpec, left: Paths, right: Paths, outputs: Paths, scope: Scope
) -> tuple[DataFrame, DataFrame, Inputs]:
    """The exact rows of the keys whose latest output differs from them, or that have none
    (module docstring; columns ``spec.output_fields``), and the deletes of the keys whose
    latest output stands but whose left key's greatest version is an end (``_key``, its text,
    and ``_deleted_at``, the end's time: a delete as the ``archive`` command writes one)."""
    comparison, out, inputs = _comparison(spark, spec, left, right, outputs, scope)
    todo = comparison.where(F.col("status").isin("missing", "wrong")).select(
        *[F.col(f"expected.{f}").alias(f) for f in spec.output_fields]
    )
    key = spec.left.key
    ends = (
        latest_left(spec, inputs["left"])
        .where(F.col(f"a.{spec.fk}").isNull())  # its greatest is an end: deleted
        .select(key, F.col(f"a.{spec.left.time}").alias("_deleted_at"))
    )
    deletes = (
        comparison.where(F.col("status") == "extra")
        .select(key)
        .join(ends, key, "inner")
        .select(F.col(key).cast("string").alias("_key"), "_deleted_at")
    )
    out.unpersist()
    return todo, deletes, inputs

"""A foreign-key join's view over bounded data: pure DataFrame -> DataFrame transforms (no I/O).

The rules of the stream (:mod:`app.logic.fk_join`), for any foreign-key spec (the car join's
are :mod:`app.batch.car_view`, the same answer under its names):

- a left key's row is its greatest version by ``(event_time, foreign key, *copied values)``;
- it carries its right key's greatest version by ``(event_time, *copied values)``, or nulls
  when that key never had one;
- an end (a tombstone, an archive's end row: its key and time, its other fields null) is a
  version ordered by its time alone (nulls first: at one time a version wins): a left key whose
  greatest is an end has no row; a right key's end answers null copies with its time.

The view is "now", the latest of each side: two ``max`` aggregations and one equi-join of their
results. A stream consumer keeps, per left key, the greatest output by
:func:`app.logic.fk_join.output_order` (left order, then right order, an output without a right
version below any with one; equal: the later record).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.joins.fk_spec import FkJoinSpec

__all__ = ["compare_fk_views", "fk_view", "latest_fk_outputs", "latest_left"]


def latest_left(spec: FkJoinSpec, left: DataFrame) -> DataFrame:
    """Per left key, its greatest version (module docstring): the key and ``a``, a struct of
    the time, the foreign key (null: an end, the key deleted) and the copies."""
    lt = spec.left
    return left.groupBy(lt.key).agg(F.max(F.struct(lt.time, spec.fk, *lt.copy)).alias("a"))


def fk_view(spec: FkJoinSpec, left: DataFrame, right: DataFrame) -> DataFrame:
    """The exact view: one row per left key. Columns: ``spec.output_fields``."""
    lt, rt = spec.left, spec.right
    rows = (
        latest_left(spec, left)
        .select(
            lt.key,
            F.col(f"a.{spec.fk}").alias(spec.fk_as),
            *[F.col(f"a.{f}").alias(f) for f in lt.copy],
            F.col(f"a.{lt.time}").alias(spec.left_time_as),
        )
        .where(F.col(spec.fk_as).isNotNull())  # its greatest is an end: deleted
    )
    # (left key, fk, *left copies, left time)
    versions = (
        right.groupBy(rt.key)
        .agg(F.max(F.struct(rt.time, *rt.copy)).alias("z"))
        .select(
            F.col(rt.key).alias(spec.fk_as),
            *[F.col(f"z.{f}").alias(f) for f in rt.copy],
            F.col(f"z.{rt.time}").alias(spec.right_time_as),
        )
    )
    # (fk, *right copies, right time)
    return rows.join(versions, spec.fk_as, "left").select(*spec.output_fields)


def latest_fk_outputs(
    spec: FkJoinSpec,
    outputs: DataFrame,
    order: str | None = "_pos",
) -> DataFrame:
    """Per left key, the output a consumer ends on, then the later record; a key whose
    greatest is a delete (``_deleted_at``: a tombstone on the output, ordered by its time
    alone) has none. Columns: ``spec.output_fields`` + ``outputs`` (records of the key)."""
    pos = F.col(order) if order else F.lit(0)
    key = spec.left.key
    if "_deleted_at" in outputs.columns:  # a delete's left key is the record key's text
        key_type = dict(outputs.dtypes)[key]
        outputs = outputs.withColumn(key, F.coalesce(key, F.col("_key").cast(key_type)))
        deleted_at = F.col("_deleted_at")
    else:
        deleted_at = F.lit(None).cast("bigint")
    no_right = F.col(spec.right_time_as).isNull()
    rest = spec.output_fields[1:]
    rank = F.struct(
        F.coalesce(spec.left_time_as, deleted_at).alias("_lt"),
        spec.fk_as,
        *spec.left.copy,
        F.when(no_right, F.lit(-1)).otherwise(F.col(spec.right_time_as)).alias("_rt"),
        *[
            F.when(no_right, F.lit(None)).otherwise(F.col(f)).alias(f"_r{i}")
            for i, f in enumerate(spec.right.copy)
        ],
        pos.alias("_o"),
    )
    best = outputs.groupBy(key).agg(
        F.max_by(F.struct(*rest, deleted_at.alias("_d")), rank).alias("o"),
        F.count(F.lit(1)).alias("outputs"),
    )
    return best.where(F.col("o._d").isNull()).select(
        key, *[F.col(f"o.{c}").alias(c) for c in rest], "outputs"
    )


def _same(spec: FkJoinSpec, a: str, b: str) -> Column:
    cond = F.lit(True)
    for c in spec.output_fields[1:]:
        cond = cond & F.col(f"{a}.{c}").eqNullSafe(F.col(f"{b}.{c}"))
    return cond


def compare_fk_views(spec: FkJoinSpec, exact: DataFrame, latest: DataFrame) -> DataFrame:
    """Full outer comparison by left key: ``status`` in matched / wrong / missing / extra.
    Columns: the left key, status, ``expected`` and ``actual`` (structs of the output)."""
    key = spec.left.key
    e = exact.select(key, F.struct(*spec.output_fields).alias("expected"))
    a = latest.select(key, F.struct(*spec.output_fields, "outputs").alias("actual"))
    status = (
        F.when(F.col("actual").isNull(), "missing")
        .when(F.col("expected").isNull(), "extra")
        .when(_same(spec, "expected", "actual"), "matched")
        .otherwise("wrong")
    )
    return e.join(a, key, "full_outer").select(key, status.alias("status"), "expected", "actual")

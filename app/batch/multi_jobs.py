"""The batch twin of a spec with several dimensions (docs/joins/declarative.md#several-dimensions,
docs/batch/index.md#several-dimensions): ``exact``, ``reconcile`` and ``backfill``.

The stream runs such a spec as a chain of links (:mod:`app.joins.dimensions`); the batch twin
does not. It answers each dimension on its own, as a one-dimension join of the user's events
(:func:`app.joins.dimensions.standalone`, with :mod:`app.batch.spec_joins`), and combines the
answers by join id: an ``inner`` dimension without an answer drops the event. Why that is the
chain's answer: :func:`app.joins.dimensions.standalone`. ``reconcile`` then holds the chain
to an answer that shares none of its code.

``--dimension`` names each dimension's archives: ``NAME=PATH`` (:func:`dimension_archives`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from app.batch import archives as A
from app.batch import spec_joins as S
from app.batch.admission import in_range
from app.batch.jobs import (
    Paths,
    Scope,
    exact_join,
    revision_log_problems,
    spec_kinds,
)
from app.batch.report import (
    Report,
    count_statuses,
    difference,
    first_per_status,
    sample_rows,
)
from app.batch.session import Steps
from app.batch.spec_joins import METHODS
from app.joins.dimensions import MultiDimensionJoin

__all__ = [
    "backfill_multi",
    "dimension_archives",
    "exact_multi",
    "reconcile_multi",
]


def dimension_archives(given: Sequence[str], multi: MultiDimensionJoin) -> dict[str, list[str]]:
    """``--dimension NAME=PATH ...`` -> archives per dimension; raises ValueError naming what is
    wrong (a bare path, an unknown name, a dimension without archives)."""
    names = [d for d, _ in multi.dimensions]
    out: dict[str, list[str]] = {d: [] for d in names}
    for entry in given:
        name, sep, path = entry.partition("=")
        if not sep or name not in out or not path:
            raise ValueError(
                f"join {multi.name!r} has several dimensions: give each one's archives as "
                f"--dimension NAME=PATH, NAME one of {', '.join(names)} (got {entry!r})"
            )
        out[name].append(path)
    lacking = [d for d, paths in out.items() if not paths]
    if lacking:
        raise ValueError(
            f"join {multi.name!r}: no archive for dimension(s) {', '.join(lacking)} "
            "(--dimension NAME=PATH)"
        )
    return out


def _answers(
    spark: SparkSession,
    multi: MultiDimensionJoin,
    events: Paths,
    dimensions: dict[str, list[str]],
    scope: Scope,
    method: str,
) -> tuple[dict[str, DataFrame], DataFrame, dict[str, int]]:
    """(each dimension's own answer by name, the admitted events, refused counts: ``events``
    and each dimension by name)."""
    answers: dict[str, DataFrame] = {}
    refused: dict[str, int] = {}
    admitted: DataFrame | None = None
    for dim, spec in multi.dimensions:
        answer, inputs = exact_join(spark, spec, events, dimensions[dim], scope, method)
        answers[dim] = answer
        counts = inputs.refused_counts()
        if admitted is None:
            admitted = inputs["events"].select(S.join_id(spec).alias("id")).distinct()
            refused["events"] = counts["events"]
        refused[dim] = counts["dimension"]
    assert admitted is not None  # a spec has one dimension at least
    return answers, admitted, refused


def _combined(multi: MultiDimensionJoin, answers: dict[str, DataFrame]) -> DataFrame:
    """The exact answer (:attr:`MultiDimensionJoin.columns`): each dimension's answer joined
    by id (a left dimension answers every event, an inner one only those it answers)."""
    (first, spec), *rest = multi.dimensions
    out = answers[first].select("id", *spec.events.copy, *multi.answer_of(first))
    for dim, _ in rest:
        out = out.join(answers[dim].select("id", *multi.answer_of(dim)), "id", "inner")
    return out.select(*multi.columns)


def exact_multi(
    spark: SparkSession,
    multi: MultiDimensionJoin,
    events: Paths,
    dimensions: dict[str, list[str]],
    scope: Scope,
    method: str = METHODS[0],
) -> tuple[DataFrame, dict[str, int]]:
    """The exact answer, and what the future rule refused of each input."""
    answers, _, refused = _answers(spark, multi, events, dimensions, scope, method)
    return _combined(multi, answers), refused


def _retracted(multi: MultiDimensionJoin) -> Column:
    """A latest revision that is no join: an inner dimension's answer taken by an end (its
    ``time_as`` null, as the chain writes a retraction)."""
    cond = F.lit(False)
    for dim in multi.inner:
        cond = cond | F.col(multi.answer_of(dim)[-1]).isNull()
    return cond


def _compare(multi: MultiDimensionJoin, exact: DataFrame, latest: DataFrame) -> DataFrame:
    """As :func:`app.batch.spec_joins.compare_joins`: id, status (matched / wrong / missing /
    extra), expected, actual."""
    e = exact.select("id", F.struct(*multi.columns).alias("expected"))
    a = latest.where(~_retracted(multi)).select(
        "id", F.struct(*S.revision_columns(multi.last)).alias("actual")
    )
    status = (
        F.when(F.col("actual").isNull(), "missing")
        .when(F.col("expected").isNull(), "extra")
        .when(S.same_answer(multi.columns[1:], "expected", "actual"), "matched")
        .otherwise("wrong")
    )
    return e.join(a, "id", "full_outer").select("id", status.alias("status"), "expected", "actual")


def _log(
    spark: SparkSession,
    multi: MultiDimensionJoin,
    revisions: Paths,
    scope: Scope,
    admitted: DataFrame,
) -> DataFrame:
    """The output archive, as far as the range asks (the revisions of the events in it)."""
    last = multi.last
    log = A.read_archive(spark, revisions, spec_kinds(last).output)
    if not scope.range.bounded:
        return log
    time = multi.dimensions[0][1].events.time
    if time in multi.columns:
        return in_range(log, scope.range, "output", time)
    return log.join(admitted, "id", "left_semi")


def _said(multi: MultiDimensionJoin, v: Any) -> str:
    parts = []
    for dim, _ in multi.dimensions:
        *copy, t = multi.answer_of(dim)
        what = ", ".join(repr(v[f]) for f in copy)
        parts.append(f"{dim} {'none' if v[t] is None else f'{what}@{v[t]}'}")
    return "; ".join(parts)


def describe_multi(multi: MultiDimensionJoin, row: Any) -> str:
    """One difference as a line: ``wrong o7: expected customer 'gold'@5; product ...,
    revision 3 [arrival, customer] says ...``."""
    e, a = row["expected"], row["actual"]
    what = f"{row['status']:<7} {row['id']}: "
    if row["status"] == "missing":
        return what + f"expected {_said(multi, e)}, no revision"
    says = f"revision {a['revision']} [{a['cause']}, {a['dimension']}] says {_said(multi, a)}"
    if row["status"] == "extra":
        return what + says + ", but no such join in the inputs"
    return what + f"expected {_said(multi, e)}, {says}"


def reconcile_multi(
    spark: SparkSession,
    steps: Steps,
    multi: MultiDimensionJoin,
    events: Paths,
    dimensions: dict[str, list[str]],
    revisions: Paths,
    scope: Scope,
    examples: int = 5,
    sample: int = 0,
    method: str = METHODS[0],
) -> Report:
    """The chain's revision log (archived) against the exact answer."""
    title, view = f"join {multi.name} ({multi.output})", f"joins:{multi.name}"
    with steps.step(f"{multi.name}: each dimension's answer, the latest revision per id"):
        answers, admitted, refused = _answers(spark, multi, events, dimensions, scope, method)
        log = _log(spark, multi, revisions, scope, admitted).cache()
        latest = S.latest_revisions(multi.last, log)
        comparison = _compare(multi, _combined(multi, answers), latest).cache()
        counts = count_statuses(comparison)
    with steps.step(f"{multi.name}: examples, revision-log checks"):
        rows = sample_rows(comparison, "id", max(examples, sample))
        shown = [describe_multi(multi, r) for r in first_per_status(rows, examples)]
        diffs = [difference(r, "id", multi.columns[1:]) for r in rows]
        problems = revision_log_problems(multi.last, log, examples)
        records = log.count()
    comparison.unpersist()
    log.unpersist()
    return Report(title, counts, records, shown, problems, diffs, view, refused)


def backfill_multi(
    spark: SparkSession,
    multi: MultiDimensionJoin,
    events: Paths,
    dimensions: dict[str, list[str]],
    revisions: Paths,
    scope: Scope,
    method: str = METHODS[0],
) -> tuple[DataFrame, dict[str, int]]:
    """The revisions (the output's fields) that move the archived log onto the exact answer,
    and the refused counts. As a one-dimension backfill (:func:`app.batch.jobs.backfill`):
    numbers continue from the log's latest, ``cause`` is ``backfill``; ``previous_<field>`` is
    what that latest said, for every dimension; ``dimension`` names the first dimension whose
    answer changes (none for a join the log never had), and an earlier dimension's
    ``<dim>_cause`` is ``backfill`` where its answer changes. An inner join no version answers
    now gets its retraction: the inner dimensions without an answer null."""
    answers, admitted, refused = _answers(spark, multi, events, dimensions, scope, method)
    exact = _combined(multi, answers)
    log = _log(spark, multi, revisions, scope, admitted)
    latest = S.latest_revisions(multi.last, log)
    comparison = _compare(multi, exact, latest)
    expected, actual = F.col("expected"), F.col("actual")
    todo = comparison.where(F.col("status").isin("wrong", "missing"))
    out = todo.select(*_revision(multi, expected, actual))
    if multi.inner:
        answered = admitted
        for dim in multi.inner:
            flag = answers[dim].select("id", F.lit(True).alias(f"_has_{dim}"))
            answered = answered.join(flag, "id", "left")
        gone = comparison.where(F.col("status") == "extra").join(answered, "id", "inner")
        out = out.unionByName(gone.select(*_retraction(multi, actual)))
    return out.select(*S.revision_columns(multi.last)), refused


def _changed(multi: MultiDimensionJoin, dim: str, a: Column, b: Column) -> Column:
    """Does dimension ``dim``'s answer differ between structs ``a`` and ``b``?"""
    cond = F.lit(False)
    for f in multi.answer_of(dim):
        cond = cond | ~a.getField(f).eqNullSafe(b.getField(f))
    return cond


def _revision(multi: MultiDimensionJoin, expected: Column, actual: Column) -> list[Column]:
    """The output fields of a backfill revision taking the log's latest (``actual``, null for
    a join it never had) to the exact answer (``expected``)."""
    changed = {d: _changed(multi, d, expected, actual) for d, _ in multi.dimensions}
    return _backfilled(
        multi,
        actual,
        {f: expected.getField(f) for f in multi.columns},
        {d: actual.isNull() | c for d, c in changed.items()},
        {d: actual.isNotNull() & c for d, c in changed.items()},
    )


def _retraction(multi: MultiDimensionJoin, actual: Column) -> list[Column]:
    """The output fields of the retraction of the log's latest (``actual``): every inner
    dimension without an answer now (``_has_<dim>`` null) null, numbered after it."""
    gone = {d: F.col(f"_has_{d}").isNull() for d in multi.inner}
    now = {
        f: F.when(gone[d], F.lit(None)).otherwise(actual.getField(f))
        for d in multi.inner
        for f in multi.answer_of(d)
    }
    return _backfilled(multi, actual, now, gone, gone)


def _backfilled(
    multi: MultiDimensionJoin,
    actual: Column,
    now: dict[str, Column],
    changed: dict[str, Column],
    named: dict[str, Column],
) -> list[Column]:
    """The output fields of a backfill revision after the log's latest (``actual``): the
    fields ``now`` sets, the rest as the latest says; numbered after it (1 for a join it never
    had), ``cause`` ``backfill``, every ``previous_<field>`` what the latest said; per
    dimension, ``changed``: its ``<dim>_cause`` becomes ``backfill``, ``named``: ``dimension``
    may name it (the first such in the spec's order)."""
    first: Column = F.lit(None).cast("string")
    for dim, _ in reversed(multi.dimensions):
        if dim in named:
            first = F.when(named[dim], dim).otherwise(first)
    cols = []
    for f in S.revision_columns(multi.last):
        dim = f.removesuffix("_cause")
        if f in now:
            cols.append(now[f].alias(f))
        elif f == "revision":
            cols.append((F.coalesce(actual.getField(f), F.lit(0)) + 1).cast("bigint").alias(f))
        elif f.startswith("previous_"):
            cols.append(actual.getField(f.removeprefix("previous_")).alias(f))
        elif f == "cause":
            cols.append(F.lit("backfill").alias(f))
        elif f == "dimension":
            cols.append(first.alias(f))
        elif f != dim and dim in changed:  # an earlier dimension's <dim>_cause
            cols.append(F.when(changed[dim], "backfill").otherwise(actual.getField(f)).alias(f))
        else:
            cols.append(actual.getField(f).alias(f))
    return cols

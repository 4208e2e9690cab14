"""The bodies of ``python -m app.batch``'s subcommands (:mod:`app.batch.cli`): ``exact``,
``reconcile``, ``backfill`` and ``bootstrap`` of an event-time join (:data:`JOBS`), and the first
three of a foreign-key one (:func:`run_fk`). Each checks the options it needs, runs its job
(:mod:`app.batch.jobs`, :mod:`app.batch.fk_jobs`, :mod:`app.batch.bootstrap`) with progress, says
what it found and returns the exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from app.batch import archives, jobs
from app.batch.arguments import settings_of
from app.batch.report import Report
from app.batch.session import Steps
from app.joins.dimensions import MultiDimensionJoin
from app.joins.fk_spec import FkJoinSpec
from app.joins.spec import JoinSpec

__all__ = [
    "JOBS",
    "run_backfill",
    "run_bootstrap",
    "run_exact",
    "run_fk",
    "run_multi",
    "run_reconcile",
]


def _steps(spark: SparkSession, args: argparse.Namespace) -> Steps:
    return Steps(spark, f"etj-{args.job}", quiet=args.no_progress)


def _say_refused(counts: dict[str, int]) -> None:
    if any(counts.values()):
        print(
            "refused as from the future (not joined): "
            + ", ".join(f"{name} {n}" for name, n in counts.items()),
            flush=True,
        )


def _revisions(args: argparse.Namespace) -> list[str]:
    """A backfill's ``--revisions``, and its ``--ledger`` when there is one (what earlier runs
    published: a second run finds those answers sent already)."""
    revisions = list(args.revisions)
    if args.ledger and os.path.exists(args.ledger) and os.path.getsize(args.ledger):
        revisions.append(args.ledger)
    return revisions


def _say_reports(args: argparse.Namespace, reports: list[Report]) -> int:
    """Print reconcile's reports (and write ``--report``); the exit code: 0 converged, 1 not."""
    for report in reports:
        print(report.render(), flush=True)
    converged = all(r.converged for r in reports)
    if args.report:
        lines = jobs.write_report(args.report, reports)
        print(f"report: {lines} line(s) -> {args.report}", flush=True)
    print("CONVERGED" if converged else "NOT CONVERGED (exit code 1)", flush=True)
    return 0 if converged else 1


def _publish(
    args: argparse.Namespace,
    steps: Steps,
    rows: list[dict[str, Any]],
    output: str,
    noun: str = "revision",
    key_field: str = "id",
) -> int:
    """A backfill's last step: ``rows`` to ``--topic`` (default ``output``) and the ledger, or
    only counted with ``--dry-run``."""
    if args.dry_run:
        print(f"backfill: {len(rows)} {noun}(s) to publish (dry run: nothing sent)", flush=True)
        return 0
    from app.batch.publish import publish  # aiokafka: only when publishing

    topic, broker = args.topic or output, args.broker or settings_of(args).broker_url
    with steps.step(f"publishing {len(rows)} {noun}s to {topic}"):
        sent = publish(broker, topic, rows, key_field=key_field, ledger=args.ledger)
    print(f"backfill: published {sent} {noun}(s) to {topic}", flush=True)
    return 0


def _no_car_range(args: argparse.Namespace, scope: jobs.Scope) -> None:
    if scope.range.bounded:
        raise SystemExit(
            f"{args.job}: the car view is the view of now; --from/--to apply to "
            "the event-time joins only"
        )


def _fk_inputs(args: argparse.Namespace, spec: FkJoinSpec, scope: jobs.Scope, *more: str) -> None:
    """A foreign-key job's options are all given, and no event-time range."""
    _no_car_range(args, scope)
    missing = [f"--{o}" for o in ("left", "right", *more) if not getattr(args, o)]
    if missing:
        raise SystemExit(f"{args.job}: join {spec.name} (foreign-key) needs {', '.join(missing)}")


def run_fk(
    spark: SparkSession, args: argparse.Namespace, spec: FkJoinSpec, scope: jobs.Scope
) -> int:
    """exact, reconcile or backfill of a foreign-key join (:mod:`app.batch.fk_jobs`)."""
    from app.batch import fk_jobs

    steps = _steps(spark, args)
    if args.job == "exact":
        _fk_inputs(args, spec, scope, "out")
        with steps.step(f"{spec.name} -> {args.out}"):
            view, inputs = fk_jobs.exact_fk(spark, spec, args.left, args.right, scope)
            archives.write_table(view, args.out)
            _say_refused(inputs.refused_counts())
        return 0
    if args.job == "reconcile":
        _fk_inputs(args, spec, scope, "revisions")
        report = fk_jobs.reconcile_fk(
            spark,
            steps,
            spec,
            args.left,
            args.right,
            args.revisions,
            scope,
            args.examples,
            args.sample if args.report else 0,
        )
        return _say_reports(args, [report])
    if args.job == "backfill":
        _fk_inputs(args, spec, scope, "revisions")
        with steps.step(f"{spec.name}: computing the keys whose output changes"):
            found, deleted, inputs = fk_jobs.backfill_fk(
                spark, spec, args.left, args.right, _revisions(args), scope
            )
            todo = found.cache()
            rows = jobs.rows_as_wire(todo)
            deletes = jobs.rows_as_wire(deleted)
        if args.out:
            with steps.step(f"writing {len(rows)} outputs -> {args.out}"):
                archives.write_table(todo, args.out)
        todo.unpersist()
        _say_refused(inputs.refused_counts())
        for r in rows[:5]:
            print(f"backfill {spec.left.key} {r[spec.left.key]}: {r}", flush=True)
        for d in deletes[:5]:
            print(
                f"backfill {spec.left.key} {d['_key']}: deleted at {d['_deleted_at']}", flush=True
            )
        if deletes and args.out:
            print(
                f"backfill: {len(deletes)} delete(s), not in {args.out} (a delete has no "
                "output row: it is published as a tombstone)",
                flush=True,
            )
        return _publish(args, steps, rows + deletes, spec.output, "output", spec.left.key)
    raise SystemExit(
        f"{args.job}: join {spec.name} is a foreign-key join; {args.job} is for "
        "event-time joins (exact, reconcile and backfill take it)"
    )


def run_multi(
    spark: SparkSession, args: argparse.Namespace, multi: MultiDimensionJoin, scope: jobs.Scope
) -> int:
    """exact, reconcile or backfill of a spec with several dimensions
    (:mod:`app.batch.multi_jobs`); ``args.dimension``: archives by dimension name."""
    from app.batch import multi_jobs as M

    steps, dims = _steps(spark, args), args.dimension
    needs = {"exact": "out", "reconcile": "revisions", "backfill": "revisions"}
    if args.job not in needs:
        raise SystemExit(
            f"{args.job}: join {multi.name} has several dimensions: {args.job} is "
            "for one-dimension joins (exact, reconcile and backfill take it)"
        )
    if not (args.events and getattr(args, needs[args.job])):
        raise SystemExit(
            f"{args.job}: join {multi.name} needs --events, --dimension NAME=PATH for each "
            f"dimension and --{needs[args.job]}"
        )
    if args.job == "exact":
        with steps.step(f"{multi.name} -> {args.out}"):
            answer, refused = M.exact_multi(spark, multi, args.events, dims, scope, args.method)
            archives.write_table(answer, args.out)
        _say_refused(refused)
        return 0
    if args.job == "reconcile":
        sample = args.sample if args.report else 0
        report = M.reconcile_multi(
            spark,
            steps,
            multi,
            args.events,
            dims,
            args.revisions,
            scope,
            args.examples,
            sample,
            args.method,
        )
        return _say_reports(args, [report])
    if args.late_events or args.late_dimension or args.before is not None:
        raise SystemExit(
            f"backfill: join {multi.name} has several dimensions: give the late records in "
            "--events and --dimension NAME=PATH (no --late-events, --late-dimension, --before)"
        )
    refuse_framed_output(multi.last, args)
    with steps.step(f"{multi.name}: computing the joins whose answer changes"):
        found, refused = M.backfill_multi(
            spark, multi, args.events, dims, _revisions(args), scope, args.method
        )
        read = [*args.events, *(p for paths in dims.values() for p in paths)]
        todo = jobs.with_lineage(found, read).cache()
        rows = jobs.rows_as_wire(todo)
    if args.out:
        with steps.step(f"writing {len(rows)} revisions -> {args.out}"):
            archives.write_table(todo, args.out)
    todo.unpersist()
    _say_refused(refused)
    for r in rows[:5]:
        print(f"backfill {r['id']} revision {r['revision']}: {r['dimension']} changed", flush=True)
    return _publish(args, steps, rows, multi.output)


def run_exact(
    spark: SparkSession, args: argparse.Namespace, spec: JoinSpec | None, scope: jobs.Scope
) -> int:
    steps = _steps(spark, args)
    join = spec is not None and args.events and args.dimension and args.out
    cars = args.cars and args.zones and args.car_out
    if not (join or cars):
        raise SystemExit(
            "exact: give --events --dimension (or --moods) --out [--join NAME] "
            "and/or --cars --zones --car-out"
        )
    if join:
        assert spec is not None
        with steps.step(f"{spec.name} -> {args.out}"):
            answer, inputs = jobs.exact_join(
                spark, spec, args.events, args.dimension, scope, args.method
            )
            archives.write_table(answer, args.out)
            _say_refused(inputs.refused_counts())
    if cars:
        _no_car_range(args, scope)
        with steps.step(f"car view -> {args.car_out}"):
            view, car_inputs = jobs.exact_cars(spark, args.cars, args.zones, scope)
            archives.write_table(view, args.car_out)
            _say_refused(car_inputs.refused_counts())
    return 0


def run_reconcile(
    spark: SparkSession, args: argparse.Namespace, spec: JoinSpec | None, scope: jobs.Scope
) -> int:
    steps = _steps(spark, args)
    reports = []
    sample = args.sample if args.report else 0
    if spec is not None:
        if not (args.events and args.dimension and args.revisions):
            raise SystemExit(
                f"reconcile: join {spec.name} needs --events, --dimension (moods: "
                "--moods) and --revisions"
            )
        reports.append(
            jobs.reconcile_join(
                spark,
                steps,
                spec,
                args.events,
                args.dimension,
                args.revisions,
                scope,
                args.examples,
                sample,
                args.method,
            )
        )
    if args.cars or args.zones or args.car_pollution:
        if not (args.cars and args.zones and args.car_pollution):
            raise SystemExit("reconcile: the car view needs --cars, --zones and --car-pollution")
        _no_car_range(args, scope)
        reports.append(
            jobs.reconcile_cars(
                spark,
                steps,
                args.cars,
                args.zones,
                args.car_pollution,
                scope,
                args.examples,
                sample,
            )
        )
    if not reports:
        raise SystemExit("reconcile: nothing to compare (see --help)")
    return _say_reports(args, reports)


def refuse_framed_output(spec: JoinSpec, args: argparse.Namespace) -> None:
    """Refuse to publish into a spec's output written as Avro or JSON-SR (``output_format``):
    the backfill writes JSON text, which that topic's readers (a Schema Registry deserializer)
    would take for a malformed record. Checked before any Spark work. ``--out`` (files),
    ``--dry-run`` or a JSON ``--topic`` of one's own still work."""
    topic = args.topic or spec.output
    if not args.dry_run and topic == spec.output and spec.output_format != "json":
        raise SystemExit(
            f"backfill: join {spec.name!r} writes {topic} as {spec.output_format} "
            "(output_format); the backfill writes JSON revisions, which that topic's readers "
            "cannot read: use --dry-run with --out to keep them in files, or --topic for a "
            "JSON topic"
        )


def run_backfill(
    spark: SparkSession, args: argparse.Namespace, spec: JoinSpec | None, scope: jobs.Scope
) -> int:
    if spec is None or not (args.events and args.dimension and args.revisions):
        raise SystemExit(
            "backfill: give --events, --dimension (moods: --moods) and --revisions [--join NAME]"
        )
    refuse_framed_output(spec, args)
    steps = _steps(spark, args)
    revisions = _revisions(args)
    with steps.step(f"{spec.name}: computing the joins whose answer changes"):
        try:
            found, inputs = jobs.backfill(
                spark,
                spec,
                args.events,
                args.dimension,
                revisions,
                scope,
                args.late_events,
                args.late_dimension,
                args.before,
                args.method,
            )
        except ValueError as exc:
            raise SystemExit(f"backfill: {exc}") from None
        todo = jobs.with_lineage(
            found, [*args.events, *args.dimension, *args.late_events, *args.late_dimension]
        ).cache()
        rows = jobs.rows_as_wire(todo)
    if args.out:
        with steps.step(f"writing {len(rows)} revisions -> {args.out}"):
            archives.write_table(todo, args.out)
    todo.unpersist()
    _say_refused(inputs.refused_counts())
    label = ", ".join(spec.dimension.copy)
    for r in rows[:5]:
        before = tuple(r[f"previous_{f}"] for f in spec.dimension.copy)
        after = tuple(r[f] for f in spec.dimension.copy)
        if len(after) == 1:
            before, after = before[0], after[0]
        print(
            f"backfill {r['id']} revision {r['revision']}: {label} {before!r} -> {after!r}",
            flush=True,
        )
    return _publish(args, steps, rows, spec.output)


def run_bootstrap(
    spark: SparkSession, args: argparse.Namespace, spec: JoinSpec | None, scope: jobs.Scope
) -> int:
    from app.batch.bootstrap import BootstrapError, bootstrap, target_of

    if spec is None or args.join is None or not args.dimension:
        raise SystemExit(
            "bootstrap: give --join NAME and --dimension CATALOGUE (Parquet, or "
            "archives of the dimension topic)"
        )
    if args.events:
        raise SystemExit("bootstrap: --events is not read (only the dimension is loaded)")
    settings = settings_of(args)
    url = args.snapshot_url or settings.snapshot_url
    if not url:
        raise SystemExit(
            "bootstrap: give --snapshot-url or set ETJ_SNAPSHOT_URL (where the "
            "workers read snapshots)"
        )
    try:
        target = target_of(spec, settings, url, args.broker or settings.broker_url)
        out = bootstrap(
            spark,
            _steps(spark, args),
            spec,
            args.dimension,
            scope,
            target,
            settings.app_id,
            args.wait_group_s,
            args.workdir,
        )
    except BootstrapError as exc:
        print(f"bootstrap refused: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:  # e.g. a task failed: its marker says so, workers keep waiting
        reason = str(exc).strip().splitlines()
        print(
            f"bootstrap failed: {reason[-1] if reason else repr(exc)}\nIf its marker was "
            "written, workers of the join wait (nothing half written is read); run the same "
            "command again (docs/operating/bootstrap.md#if-the-job-fails-half-way)",
            file=sys.stderr,
            flush=True,
        )
        return 1
    _say_refused({"dimension": out.refused})
    if out.invalid:
        print(
            f"not loaded: {out.invalid:,} invalid record(s) of the catalogue (a field missing, "
            "of another type or out of range: what a worker dead-letters)",
            flush=True,
        )
    for s in out.partitions:
        print(
            f"  {out.changelog}[{s.partition}]: {s.keys:,} keys, offsets {s.first_offset}.."
            f"{s.last_offset} ({s.changelog_bytes:,} bytes), snapshot "
            f"{s.snapshot_bytes:,} bytes (changelog "
            f"{s.changelog_s:.1f} s, database {s.database_s:.1f} s, upload {s.upload_s:.1f} s)",
            flush=True,
        )
    print(
        f"bootstrap {out.job}: {out.keys:,} keys of {spec.name} in {len(out.partitions)} "
        f"partition(s), {out.changelog_bytes:,} changelog bytes, {out.snapshot_bytes:,} "
        f"snapshot bytes, {out.seconds:.1f} s; workers start from it (snapshots in {url})",
        flush=True,
    )
    return 0


JOBS = {
    "exact": run_exact,
    "reconcile": run_reconcile,
    "backfill": run_backfill,
    "bootstrap": run_bootstrap,
}

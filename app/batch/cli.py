"""Command line of the batch twin: ``python -m app.batch {exact,reconcile,backfill,bootstrap}``.

The same file runs under spark-submit (``spark-submit app/batch/__main__.py exact ...``): the
master then comes from spark-submit, otherwise it is ``local[*]`` (or ``--master``). Every
archive option (``--events``, ``--dimension``, ``--revisions`` ...) takes one or more archives
(JSON lines or Parquet).

Which join: ``--join NAME`` names any join (``app.joins.catalog.batch_specs``:
the built-in ``moods`` and ``movies`` and every spec of ``ETJ_JOINS_FILE`` or
``--joins-file``); its inputs are ``--events`` and ``--dimension``. Without ``--join``,
``--moods``/``--events`` are the mood join's inputs, as before (``--moods`` is also the
``--dimension`` of ``--join moods``). ``--cars``/``--zones`` are the car view's.

A foreign-key join (``"kind": "foreign-key"``, the car join ``cars`` among them) is named the
same way, ``--join NAME``; its inputs are ``--left`` and ``--right``, its output archive
``--revisions`` (:mod:`app.batch.fk_jobs`).

``bootstrap --join NAME --dimension CATALOGUE...`` writes the join's dimension table as the
workers' starting state (:mod:`app.batch.bootstrap`, docs/operating/bootstrap.md).

``pack-env [--out FILE.tar.gz]`` packs what a cluster's executors need of etj, to send with a job
(``--archives FILE.tar.gz#etj-env``; :mod:`app.batch.pack`, docs/batch/cluster.md). No Spark.

Exit codes: 0 ok (reconcile: converged); 1 reconcile found a difference, or bootstrap refused
to run (the message says why); 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from app.batch import archives, jobs
from app.batch.pack import DEFAULT_OUT
from app.batch.session import Steps, batch_session
from app.batch.spec_joins import METHODS
from app.joins.fk_spec import FkJoinSpec
from app.joins.spec import JoinSpec, SpecError
from app.logic.event_range import EventRange, parse_time


def _time(text: str) -> int:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--master", help="Spark master (default: spark-submit's, or local[*])")
    common.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark setting (repeatable)",
    )
    common.add_argument(
        "--no-progress", action="store_true", help="no progress bar nor step lines on stderr"
    )
    common.add_argument(
        "--method",
        choices=METHODS,
        default=METHODS[0],
        help="as-of join method: 'window' (union + window, any Spark >= 3.5; "
        "the faster here) or 'asof-join' (Spark 4's native sort-merge as-of "
        "join); same answer",
    )
    common.add_argument(
        "--join",
        metavar="NAME",
        help="the join (a spec name: moods, movies, or one of ETJ_JOINS_FILE); "
        "default: moods, from --moods/--events",
    )
    common.add_argument(
        "--joins-file",
        metavar="FILE.json",
        help="join specs besides the built-ins (default: ETJ_JOINS_FILE)",
    )
    common.add_argument(
        "--events", nargs="+", default=[], help="the join's events archive(s) (moods: etj-events)"
    )
    common.add_argument(
        "--dimension",
        nargs="+",
        default=[],
        help="the join's dimension archive(s) (moods: etj-moods, as --moods)",
    )
    common.add_argument(
        "--moods", nargs="+", default=[], help="etj-moods archive(s): the mood join's dimension"
    )
    common.add_argument(
        "--left",
        nargs="+",
        default=[],
        help="a foreign-key join's left archive(s) (cars: etj-car-arrivals)",
    )
    common.add_argument(
        "--right",
        nargs="+",
        default=[],
        help="a foreign-key join's right archive(s) (cars: etj-zones)",
    )
    common.add_argument(
        "--from",
        dest="start",
        type=_time,
        metavar="TIME",
        help="only the joins of events at or after TIME (epoch ms, or ISO: "
        "2026-10-01, 2026-10-01T12:00Z); earlier dimension versions are still "
        "read (docs/batch/index.md#an-event-time-range)",
    )
    common.add_argument(
        "--to",
        dest="end",
        type=_time,
        metavar="TIME",
        help="only the joins of events before TIME (same forms)",
    )
    common.add_argument(
        "--now",
        type=_time,
        metavar="TIME",
        help="the wall clock of the rule on records from the future (default: when the run starts)",
    )
    common.add_argument(
        "--max-future-ms",
        type=int,
        metavar="MS",
        help="refuse records this far ahead of min(Kafka timestamp, now) "
        "(default: ETJ_MAX_FUTURE_MS)",
    )

    p = argparse.ArgumentParser(
        prog="python -m app.batch", description="etj batch twin: exact answer, reconcile, backfill"
    )
    sub = p.add_subparsers(dest="job", required=True)

    ex = sub.add_parser(
        "exact",
        parents=[common],
        help="write the exact answer of a join (and the car view) of archives",
    )
    ex.add_argument(
        "--out", help="the join's answer: *.jsonl (one file), *.parquet, or a directory"
    )
    ex.add_argument("--cars", nargs="+", default=[], help="etj-car-arrivals archive(s)")
    ex.add_argument("--zones", nargs="+", default=[], help="etj-zones archive(s)")
    ex.add_argument("--car-out", help="car view output, same forms as --out")

    rc = sub.add_parser(
        "reconcile", parents=[common], help="compare archived stream output with the exact answer"
    )
    rc.add_argument(
        "--revisions",
        nargs="+",
        default=[],
        help="the join's output archive(s) (moods: etj-mood-recommendations)",
    )
    rc.add_argument("--cars", nargs="+", default=[])
    rc.add_argument("--zones", nargs="+", default=[])
    rc.add_argument("--car-pollution", nargs="+", default=[], help="etj-car-pollution archive(s)")
    rc.add_argument("--examples", type=int, default=5, help="examples shown per kind")
    rc.add_argument(
        "--report",
        metavar="FILE.jsonl",
        help="also write the report as JSON lines: per view a summary (counts per "
        "kind, converged or not), then per sampled difference the stream's latest "
        "and the exact answer",
    )
    rc.add_argument(
        "--sample",
        type=int,
        default=1000,
        help="differences per kind written to --report (default 1000)",
    )

    bf = sub.add_parser(
        "backfill", parents=[common], help="publish the corrections a late batch implies"
    )
    bf.add_argument(
        "--revisions", nargs="+", default=[], help="the join's output archive(s) (required)"
    )
    bf.add_argument(
        "--late-events",
        nargs="+",
        default=[],
        help="the late batch: events (plain, or an etj-late archive)",
    )
    bf.add_argument(
        "--late-dimension",
        nargs="+",
        default=[],
        help="the late batch: dimension versions (plain, or an etj-late archive)",
    )
    bf.add_argument(
        "--late-moods",
        nargs="+",
        default=[],
        help="the mood join's late moods (as --late-dimension)",
    )
    bf.add_argument(
        "--before",
        type=int,
        metavar="EVENT_TIME_MS",
        help="only joins with event_time < this (e.g. the stream's horizon)",
    )
    bf.add_argument("--out", help="also write the revisions to this file (*.jsonl/*.parquet)")
    bf.add_argument(
        "--dry-run", action="store_true", help="compute and show the revisions, publish nothing"
    )
    bf.add_argument("--broker", help="broker URL (default: ETJ_BROKER_URL)")
    bf.add_argument("--topic", help="output topic (default: the join's output)")
    bf.add_argument(
        "--ledger",
        help="JSON lines of what backfills published: read as part "
        "of the output log, appended after each publish",
    )

    bs = sub.add_parser(
        "bootstrap",
        parents=[common],
        help="build a join's dimension table from a catalogue (Parquet or topic "
        "archives) as the workers' starting state: changelog rows and snapshots",
    )
    bs.add_argument(
        "--snapshot-url", help="where the workers read snapshots (default: ETJ_SNAPSHOT_URL)"
    )
    bs.add_argument("--broker", help="broker URL (default: ETJ_BROKER_URL)")
    bs.add_argument(
        "--wait-group-s",
        type=float,
        default=60.0,
        metavar="S",
        help="how long to wait for the join's consumer group to have no member "
        "(default 60: a stopped worker stays a member until its session times out)",
    )
    bs.add_argument(
        "--workdir",
        help="executors' local folder for the databases being built "
        "(default: the system's temporary folder)",
    )

    pk = sub.add_parser(
        "pack-env",
        help="pack the project and what the executors need of its "
        "dependencies (a .tar.gz to send with a job: --archives "
        "FILE#etj-env --conf spark.pyspark.python=./etj-env/bin/python)",
    )
    pk.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="FILE.tar.gz",
        help=f"the archive (default: {DEFAULT_OUT}); kept when it is up to date",
    )
    pk.add_argument("--force", action="store_true", help="write it even if up to date")
    return p


def _conf(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--conf wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Run one job; ``spark``: an existing session (tests), else one is built and stopped."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.job == "pack-env":
        from app.batch.pack import main as pack_env

        return pack_env(args.out, force=args.force)
    try:
        spec, scope = _join(args), _scope(args)
    except (SpecError, ValueError) as exc:
        parser.error(str(exc))
    own = spark is None
    if spark is None:
        spark = batch_session(
            f"etj-{args.job}", args.master, not args.no_progress, _conf(args.conf)
        )
    try:
        if isinstance(spec, FkJoinSpec):
            return run_fk(spark, args, spec, scope)
        return JOBS[args.job](spark, args, spec, scope)
    finally:
        if own:
            spark.stop()


def _settings(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from app.settings import get_settings

    s = get_settings()
    if args.joins_file:
        s = s.model_copy(update={"joins_file": Path(args.joins_file)})
    return s


def _join(args: argparse.Namespace) -> JoinSpec | FkJoinSpec | None:
    """The join of ``--join`` (or moods, when only its legacy options are given); its
    dimension archives land in ``args.dimension``. None: no join asked for (cars only)."""
    from app.joins.catalog import batch_fk_specs, batch_specs

    name = args.join
    if name is None and (
        args.moods
        or args.events
        or args.dimension
        or getattr(args, "revisions", None)
        or getattr(args, "late_moods", None)
    ):
        name = "moods"
    if args.moods:
        if name != "moods":
            raise ValueError(
                f"--moods is the mood join's dimension; for join {name!r} give --dimension"
            )
        if args.dimension:
            raise ValueError("give --moods or --dimension, not both")
        args.dimension = args.moods
    if getattr(args, "late_moods", None):
        if name != "moods":
            raise ValueError(
                f"--late-moods belongs to the mood join; for join {name!r} give --late-dimension"
            )
        args.late_dimension = [*args.late_dimension, *args.late_moods]
    if name is None:
        if args.left or args.right:
            raise ValueError("--left/--right are a foreign-key join's inputs: give --join NAME")
        return None
    fks = batch_fk_specs(_settings(args))
    if name in fks:
        if args.events or args.dimension:
            raise ValueError(
                f"join {name!r} is a foreign-key join: its inputs are --left and "
                "--right, not --events/--dimension"
            )
        return fks[name]
    if args.left or args.right:
        raise ValueError(
            f"--left/--right are a foreign-key join's inputs; join {name!r} reads "
            "--events and --dimension"
        )
    specs = batch_specs(_settings(args))
    if name not in specs:
        raise ValueError(
            f"unknown join {name!r}; this configuration has: "
            f"{', '.join([*specs, *fks])} (more with --joins-file / "
            "ETJ_JOINS_FILE)"
        )
    return specs[name]


def _scope(args: argparse.Namespace) -> jobs.Scope:
    now = args.now if args.now is not None else int(time.time() * 1000)
    tolerance = (
        args.max_future_ms if args.max_future_ms is not None else _settings(args).max_future_ms
    )
    if tolerance < 0:
        raise ValueError("--max-future-ms must not be negative")
    return jobs.Scope(now, tolerance, EventRange(args.start, args.end))


def _steps(spark: SparkSession, args: argparse.Namespace) -> Steps:
    return Steps(spark, f"etj-{args.job}", quiet=args.no_progress)


def _say_refused(counts: dict[str, int]) -> None:
    if any(counts.values()):
        print(
            "refused as from the future (not joined): "
            + ", ".join(f"{name} {n}" for name, n in counts.items()),
            flush=True,
        )


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
        print(report.render(), flush=True)
        if args.report:
            lines = jobs.write_report(args.report, [report])
            print(f"report: {lines} line(s) -> {args.report}", flush=True)
        print("CONVERGED" if report.converged else "NOT CONVERGED (exit code 1)", flush=True)
        return 0 if report.converged else 1
    if args.job == "backfill":
        from app.batch.publish import publish  # aiokafka: only when publishing

        _fk_inputs(args, spec, scope, "revisions")
        revisions = list(args.revisions)
        if args.ledger and os.path.exists(args.ledger) and os.path.getsize(args.ledger):
            revisions.append(args.ledger)
        with steps.step(f"{spec.name}: computing the keys whose output changes"):
            found, inputs = fk_jobs.backfill_fk(
                spark, spec, args.left, args.right, revisions, scope
            )
            todo = found.cache()
            rows = jobs.rows_as_wire(todo)
        if args.out:
            with steps.step(f"writing {len(rows)} outputs -> {args.out}"):
                archives.write_table(todo, args.out)
        todo.unpersist()
        _say_refused(inputs.refused_counts())
        for r in rows[:5]:
            print(f"backfill {spec.left.key} {r[spec.left.key]}: {r}", flush=True)
        if args.dry_run:
            print(f"backfill: {len(rows)} output(s) to publish (dry run: nothing sent)", flush=True)
            return 0
        topic, broker = args.topic or spec.output, args.broker or _settings(args).broker_url
        with steps.step(f"publishing {len(rows)} outputs to {topic}"):
            sent = publish(broker, topic, rows, key_field=spec.left.key, ledger=args.ledger)
        print(f"backfill: published {sent} output(s) to {topic}", flush=True)
        return 0
    raise SystemExit(
        f"{args.job}: join {spec.name} is a foreign-key join; {args.job} is for "
        "event-time joins (exact, reconcile and backfill take it)"
    )


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
    for report in reports:
        print(report.render(), flush=True)
    converged = all(r.converged for r in reports)
    if args.report:
        lines = jobs.write_report(args.report, reports)
        print(f"report: {lines} line(s) -> {args.report}", flush=True)
    print("CONVERGED" if converged else "NOT CONVERGED (exit code 1)", flush=True)
    return 0 if converged else 1


def run_backfill(
    spark: SparkSession, args: argparse.Namespace, spec: JoinSpec | None, scope: jobs.Scope
) -> int:
    from app.batch.publish import publish  # aiokafka: only when publishing

    if spec is None or not (args.events and args.dimension and args.revisions):
        raise SystemExit(
            "backfill: give --events, --dimension (moods: --moods) and --revisions [--join NAME]"
        )
    steps = _steps(spark, args)
    revisions = list(args.revisions)
    if args.ledger and os.path.exists(args.ledger) and os.path.getsize(args.ledger):
        revisions.append(args.ledger)
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
    if not args.dry_run:
        topic, broker = args.topic or spec.output, args.broker or _settings(args).broker_url
        with steps.step(f"publishing {len(rows)} revisions to {topic}"):
            sent = publish(broker, topic, rows, ledger=args.ledger)
        print(f"backfill: published {sent} revision(s) to {topic}", flush=True)
    else:
        print(f"backfill: {len(rows)} revision(s) to publish (dry run: nothing sent)", flush=True)
    return 0


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
    settings = _settings(args)
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

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Command line of the batch twin: ``python -m app.batch {exact,reconcile,backfill} ...``.

The same file runs under spark-submit (``spark-submit app/batch/__main__.py exact ...``): the
master then comes from spark-submit, otherwise it is ``local[*]`` (or ``--master``). Every
``--moods``/``--events``/... option takes one or more archives (JSON lines or Parquet).
Exit codes: 0 ok (reconcile: converged); 1 reconcile found a difference; 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from pyspark.sql import SparkSession

from app.batch import archives, jobs
from app.batch.mood_joins import METHODS
from app.batch.session import Steps, batch_session


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--master", help="Spark master (default: spark-submit's, or local[*])")
    common.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark setting (repeatable)")
    common.add_argument("--no-progress", action="store_true",
                        help="no progress bar nor step lines on stderr")
    common.add_argument("--method", choices=METHODS, default=METHODS[0],
                        help="as-of join method: 'window' (union + window, any Spark >= 3.5; "
                        "the faster here) or 'asof-join' (Spark 4's native sort-merge as-of "
                        "join); same answer")

    p = argparse.ArgumentParser(prog="python -m app.batch",
                                description="etj batch twin: exact answer, reconcile, backfill")
    sub = p.add_subparsers(dest="job", required=True)

    ex = sub.add_parser("exact", parents=[common],
                        help="write the exact mood joins (and car view) of input archives")
    ex.add_argument("--moods", nargs="+", default=[])
    ex.add_argument("--events", nargs="+", default=[])
    ex.add_argument("--out", help="mood joins: *.jsonl (one file), *.parquet, or a directory")
    ex.add_argument("--cars", nargs="+", default=[], help="etj-car-arrivals archive(s)")
    ex.add_argument("--zones", nargs="+", default=[], help="etj-zones archive(s)")
    ex.add_argument("--car-out", help="car view output, same forms as --out")

    rc = sub.add_parser("reconcile", parents=[common],
                        help="compare archived stream output with the exact answer")
    rc.add_argument("--moods", nargs="+", default=[])
    rc.add_argument("--events", nargs="+", default=[])
    rc.add_argument("--revisions", nargs="+", default=[],
                    help="etj-mood-recommendations archive(s)")
    rc.add_argument("--cars", nargs="+", default=[])
    rc.add_argument("--zones", nargs="+", default=[])
    rc.add_argument("--car-pollution", nargs="+", default=[], help="etj-car-pollution archive(s)")
    rc.add_argument("--examples", type=int, default=5, help="examples shown per kind")
    rc.add_argument("--report", metavar="FILE.jsonl",
                    help="also write the report as JSON lines: per view a summary (counts per "
                    "kind, converged or not), then per sampled difference the stream's latest "
                    "and the exact answer")
    rc.add_argument("--sample", type=int, default=1000,
                    help="differences per kind written to --report (default 1000)")

    bf = sub.add_parser("backfill", parents=[common],
                        help="publish the corrections a late batch implies")
    bf.add_argument("--moods", nargs="+", default=[], required=True)
    bf.add_argument("--events", nargs="+", default=[], required=True)
    bf.add_argument("--revisions", nargs="+", default=[], required=True,
                    help="etj-mood-recommendations archive(s)")
    bf.add_argument("--late-moods", nargs="+", default=[],
                    help="the late batch: moods (plain, or an etj-late archive)")
    bf.add_argument("--late-events", nargs="+", default=[],
                    help="the late batch: recommendations (plain, or an etj-late archive)")
    bf.add_argument("--before", type=int, metavar="EVENT_TIME_MS",
                    help="only joins with event_time < this (e.g. the stream's horizon)")
    bf.add_argument("--out", help="also write the revisions to this file (*.jsonl/*.parquet)")
    bf.add_argument("--dry-run", action="store_true",
                    help="compute and show the revisions, publish nothing")
    bf.add_argument("--broker", help="broker URL (default: ETJ_BROKER_URL)")
    bf.add_argument("--topic", help="output topic (default: ETJ_OUTPUT_TOPIC)")
    bf.add_argument("--ledger", help="JSON lines of what backfills published: read as part "
                    "of the output log, appended after each publish")
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
    args = _parser().parse_args(argv)
    own = spark is None
    if spark is None:
        spark = batch_session(f"etj-{args.job}", args.master, not args.no_progress,
                              _conf(args.conf))
    try:
        return JOBS[args.job](spark, args)
    finally:
        if own:
            spark.stop()


def _steps(spark: SparkSession, args: argparse.Namespace) -> Steps:
    return Steps(spark, f"etj-{args.job}", quiet=args.no_progress)


def run_exact(spark: SparkSession, args: argparse.Namespace) -> int:
    steps = _steps(spark, args)
    if not ((args.moods and args.events and args.out)
            or (args.cars and args.zones and args.car_out)):
        raise SystemExit("exact: give --moods --events --out and/or --cars --zones --car-out")
    if args.moods and args.events and args.out:
        with steps.step(f"mood joins -> {args.out}"):
            archives.write_table(jobs.exact_moods(spark, args.moods, args.events, args.method),
                                 args.out)
    if args.cars and args.zones and args.car_out:
        with steps.step(f"car view -> {args.car_out}"):
            archives.write_table(jobs.exact_cars(spark, args.cars, args.zones), args.car_out)
    return 0


def run_reconcile(spark: SparkSession, args: argparse.Namespace) -> int:
    steps = _steps(spark, args)
    reports = []
    sample = args.sample if args.report else 0
    if args.moods or args.events or args.revisions:
        if not (args.moods and args.events and args.revisions):
            raise SystemExit("reconcile: mood joins need --moods, --events and --revisions")
        reports.append(jobs.reconcile_moods(spark, steps, args.moods, args.events,
                                            args.revisions, args.examples, sample, args.method))
    if args.cars or args.zones or args.car_pollution:
        if not (args.cars and args.zones and args.car_pollution):
            raise SystemExit("reconcile: the car view needs --cars, --zones and --car-pollution")
        reports.append(jobs.reconcile_cars(spark, steps, args.cars, args.zones,
                                           args.car_pollution, args.examples, sample))
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


def run_backfill(spark: SparkSession, args: argparse.Namespace) -> int:
    from app.batch.publish import publish  # aiokafka: only when publishing

    steps = _steps(spark, args)
    revisions = list(args.revisions)
    if args.ledger and os.path.exists(args.ledger) and os.path.getsize(args.ledger):
        revisions.append(args.ledger)
    with steps.step("computing the joins whose answer changes"):
        todo = jobs.backfill(spark, args.moods, args.events, revisions, args.late_moods,
                             args.late_events, args.before, args.method).cache()
        rows = jobs.rows_as_wire(todo)
    if args.out:
        with steps.step(f"writing {len(rows)} revisions -> {args.out}"):
            archives.write_table(todo, args.out)
    todo.unpersist()
    for r in rows[:5]:
        print(f"backfill {r['id']} revision {r['revision']}: "
              f"{r['previous_mood']!r} -> {r['mood']!r}", flush=True)
    if not args.dry_run:
        from app.settings import get_settings

        s = get_settings()
        topic, broker = args.topic or s.output_topic, args.broker or s.broker_url
        with steps.step(f"publishing {len(rows)} revisions to {topic}"):
            sent = publish(broker, topic, rows, ledger=args.ledger)
        print(f"backfill: published {sent} revision(s) to {topic}", flush=True)
    else:
        print(f"backfill: {len(rows)} revision(s) to publish (dry run: nothing sent)",
              flush=True)
    return 0


JOBS = {"exact": run_exact, "reconcile": run_reconcile, "backfill": run_backfill}

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

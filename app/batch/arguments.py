"""The command line of ``python -m app.batch`` (:mod:`app.batch.cli`): its options
(:func:`build_parser`), and what they name: the join (:func:`join_of`: ``--join``, or the mood
join's legacy options), the records a run admits (:func:`scope_of`: ``--from``/``--to``,
``--now``, ``--max-future-ms``), the settings (:func:`settings_of`: ``--joins-file``) and extra
Spark settings (:func:`spark_conf`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from app.batch import jobs
from app.batch.pack import DEFAULT_OUT
from app.batch.spec_joins import METHODS
from app.joins.dimensions import MultiDimensionJoin
from app.joins.fk_spec import FkJoinSpec
from app.joins.spec import JoinSpec
from app.logic.event_range import EventRange, parse_time

__all__ = ["build_parser", "join_of", "scope_of", "settings_of", "spark_conf"]


def _time(text: str) -> int:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
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
        help="the join's dimension archive(s) (moods: etj-moods, as --moods); a join with "
        "several dimensions: NAME=PATH for each (--dimension customer=c.jsonl product=p.jsonl)",
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


def spark_conf(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--conf wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def settings_of(args: argparse.Namespace):
    from app.settings import get_settings

    s = get_settings()
    if args.joins_file:
        s = s.model_copy(update={"joins_file": Path(args.joins_file)})
    return s


def join_of(args: argparse.Namespace) -> JoinSpec | FkJoinSpec | MultiDimensionJoin | None:
    """The join of ``--join`` (or moods, when only its legacy options are given); its
    dimension archives land in ``args.dimension`` (a spec with several dimensions: a dict of
    them by name, from ``NAME=PATH`` entries). None: no join asked for (cars only)."""
    from app.batch.multi_jobs import dimension_archives
    from app.joins.catalog import batch_fk_specs, batch_multi_specs, batch_specs

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
    fks = batch_fk_specs(settings_of(args))
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
    multi = batch_multi_specs(settings_of(args))
    if name in multi:
        args.dimension = dimension_archives(args.dimension, multi[name])
        return multi[name]
    specs = batch_specs(settings_of(args))
    if name not in specs:
        raise ValueError(
            f"unknown join {name!r}; this configuration has: "
            f"{', '.join([*specs, *multi, *fks])} (more with --joins-file / "
            "ETJ_JOINS_FILE)"
        )
    return specs[name]


def scope_of(args: argparse.Namespace) -> jobs.Scope:
    now = args.now if args.now is not None else int(time.time() * 1000)
    tolerance = (
        args.max_future_ms if args.max_future_ms is not None else settings_of(args).max_future_ms
    )
    if tolerance < 0:
        raise ValueError("--max-future-ms must not be negative")
    return jobs.Scope(now, tolerance, EventRange(args.start, args.end))

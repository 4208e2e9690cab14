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

A spec with several dimensions (``"dimensions"``) is named by its own name; ``--dimension`` then
gives each dimension's archives as ``NAME=PATH`` (:mod:`app.batch.multi_jobs`).

A foreign-key join (``"kind": "foreign-key"``, the car join ``cars`` among them) is named the
same way, ``--join NAME``; its inputs are ``--left`` and ``--right``, its output archive
``--revisions`` (:mod:`app.batch.fk_jobs`).

``bootstrap --join NAME --dimension CATALOGUE...`` writes the join's dimension table as the
workers' starting state (:mod:`app.batch.bootstrap`, docs/operating/bootstrap.md).

``pack-env [--out FILE.tar.gz]`` packs what a cluster's executors need of etj, to send with a job
(``--archives FILE.tar.gz#etj-env``; :mod:`app.batch.pack`, docs/batch/cluster.md). No Spark.

Exit codes: 0 ok (reconcile: converged); 1 reconcile found a difference, or bootstrap refused
to run (the message says why); 2 bad usage.

The options and what they name: :mod:`app.batch.arguments`; each subcommand's body:
:mod:`app.batch.subcommands`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pyspark.sql import SparkSession

from app.batch.arguments import build_parser, join_of, scope_of, spark_conf
from app.batch.session import batch_session
from app.batch.subcommands import JOBS, run_fk, run_multi
from app.joins.dimensions import MultiDimensionJoin
from app.joins.fk_spec import FkJoinSpec
from app.joins.spec import SpecError


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Run one job; ``spark``: an existing session (tests), else one is built and stopped."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.job == "pack-env":
        from app.batch.pack import main as pack_env

        return pack_env(args.out, force=args.force)
    try:
        spec, scope = join_of(args), scope_of(args)
    except (SpecError, ValueError) as exc:
        parser.error(str(exc))
    own = spark is None
    if spark is None:
        spark = batch_session(
            f"etj-{args.job}", args.master, not args.no_progress, spark_conf(args.conf)
        )
    try:
        if isinstance(spec, FkJoinSpec):
            return run_fk(spark, args, spec, scope)
        if isinstance(spec, MultiDimensionJoin):
            return run_multi(spark, args, spec, scope)
        return JOBS[args.job](spark, args, spec, scope)
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

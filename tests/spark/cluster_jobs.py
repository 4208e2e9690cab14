"""``spark-submit tests/spark/cluster_jobs.py JOBS.json``: several ``python -m app.batch``
commands in one Spark application (one driver, one set of executors), each through the same
:func:`app.batch.cli.main` as ``app/batch/__main__.py``, with the session ``spark-submit`` gave
(:func:`app.batch.session.batch_session`, as under ``__main__``).

Why: each ``spark-submit`` starts a driver JVM and executors on every worker (~10 s on the test
cluster); the cluster test runs six commands. ``JOBS.json`` is a list of argument lists; each
command's exit code and printed lines are written to ``JOBS.json.out`` (a list, same order).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path


def run(path: Path) -> None:
    from app.batch.cli import main
    from app.batch.session import batch_session

    commands = json.loads(path.read_text())
    spark = batch_session("etj-cluster-jobs", None, progress=False)
    results = []
    try:
        for argv in commands:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    code = main(argv, spark=spark)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 2
            results.append({"argv": argv, "code": code, "stdout": out.getvalue()})
            print(f"[cluster-jobs] {argv[0]} -> {code}", file=sys.stderr, flush=True)
    finally:
        Path(str(path) + ".out").write_text(json.dumps(results))
        spark.stop()


if __name__ == "__main__":
    run(Path(sys.argv[1]))

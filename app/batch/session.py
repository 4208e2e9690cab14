"""The SparkSession of the batch jobs, and the progress display of long ones.

Progress: Spark's own console progress bar (``[Stage 3:====>   (1 + 1) / 2]`` on stderr, for
stages longer than half a second) plus one line per job step with its elapsed time; each step
also names the Spark jobs it runs (``setJobDescription``), so the web UI shows the same names.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator, Mapping

from pyspark.sql import SparkSession


def prepare_environment() -> None:
    """Python workers use *this* interpreter; Spark binds loopback unless told otherwise.

    Without these, workers start the system Python (without the project's packages) and Spark
    binds a non-loopback address (docs/batch/index.md). An explicit environment wins.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def batch_session(app_name: str = "etj-batch", master: str | None = None,
                  progress: bool = True, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session for the command line. ``master`` None: spark-submit's, else ``local[*]``."""
    prepare_environment()
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        master = "local[*]"
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "true" if progress else "false",
        # one machine: Spark's default of 200 shuffle partitions is 200 tiny tasks per stage
        **({"spark.sql.shuffle.partitions": "8"} if (master or "").startswith("local") else {}),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


class Steps:
    """Prints ``[etj-batch   4.2s] reading archives`` lines to stderr as a job goes."""

    def __init__(self, spark: SparkSession, job: str, quiet: bool = False) -> None:
        self.spark, self.job, self.quiet = spark, job, quiet
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        if not self.quiet:
            print(f"[{self.job} {time.monotonic() - self.started:6.1f}s] {text}",
                  file=sys.stderr, flush=True)

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.say(what + " ...")
        self.spark.sparkContext.setJobDescription(f"{self.job}: {what}")
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
        self.say(f"{what}: done in {time.monotonic() - t0:.1f}s")

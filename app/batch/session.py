"""The SparkSession of the batch jobs, and the progress display of long ones.

Progress: Spark's own console progress bar (``[Stage 3:====>   (1 + 1) / 2]`` on stderr, for
stages longer than half a second) plus one line per job step with its elapsed time; each step
also names the Spark jobs it runs (``setJobDescription``), so the web UI shows the same names.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark.sql import SparkSession


def on_this_machine(master: str | None) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local-cluster[...]``: Spark in this process (and
    its children). A ``spark://``, ``yarn`` or ``k8s://`` master is a cluster, even one whose
    master listens on this machine: its executors may be other machines."""
    return master is not None and (
        master == "local" or master.startswith(("local[", "local-cluster["))
    )


def prepare_environment(
    master: str | None = "local[*]", conf: Mapping[str, str] | None = None
) -> None:
    """What Spark needs from the environment for ``master``, before the session starts.

    A local master: Python workers use *this* interpreter (the system Python has not the
    project's packages) and Spark binds loopback (not a non-loopback address, which it otherwise
    picks and warns about: docs/batch/index.md). A cluster: nothing is forced, since the
    executors are other machines; this interpreter's path exists only here, and a driver bound
    to loopback cannot be reached. They use the cluster's Python, or the one the job ships
    (``spark.pyspark.python``: docs/batch/cluster.md), and the driver binds what Spark picks or
    ``spark.driver.host``/``SPARK_LOCAL_IP`` say. An explicit environment wins everywhere (the
    one-machine cluster of docs/batch/cluster.md sets both).

    ``conf``'s ``spark.pyspark.python`` becomes ``PYSPARK_PYTHON``, as spark-submit does: PySpark
    reads the executors' Python from the environment only, and ``python -m app.batch --conf``
    would otherwise drop it.
    """
    python = (conf or {}).get("spark.pyspark.python")
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    if not on_this_machine(master):
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def submitted_master() -> str | None:
    """The master spark-submit gave this driver (None when not under spark-submit): the JVM
    that started this process holds it as a system property."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM, starts nothing
    return SparkConf().get("spark.master", None)


def batch_session(
    app_name: str = "etj-batch",
    master: str | None = None,
    progress: bool = True,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session for the command line. ``master`` None: spark-submit's, else ``local[*]``."""
    under_submit = master is None and "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not under_submit:
        master = "local[*]"
    prepare_environment(submitted_master() if under_submit else master, conf)
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
            print(
                f"[{self.job} {time.monotonic() - self.started:6.1f}s] {text}",
                file=sys.stderr,
                flush=True,
            )

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.say(what + " ...")
        self.spark.sparkContext.setJobDescription(f"{self.job}: {what}")
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]  # None clears it (a local property: setLocalProperty's doc); pyspark annotates str
        self.say(f"{what}: done in {time.monotonic() - t0:.1f}s")

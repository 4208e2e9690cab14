"""Where a worker's time goes while it joins a backlog: py-spy attached to the worker process.

Loads the throughput workload, starts a worker, attaches ``py-spy record`` (sampling, no code
change) for the busy period and prints the hottest frames, inclusive (a frame and everything it
calls) and per thread (Faust runs the consumer in a thread of its own), with the share of samples
each thread spends idle in epoll — an asyncio worker waiting for the broker's acks is idle, so
that is where a per-record flush shows up. On uvloop (the worker's default) the wait is in C and
shows as the loop's own frame, ``Worker.execute_from_commandline``, not as idle: ``py-spy
--native`` tells the two apart). Writes the collapsed stacks to
``bench/results/profile-<tag>.txt`` (load them in speedscope.app or flamegraph.pl).

``python -m bench.profile_worker [--records N] [--seconds S]`` (needs the ``py-spy`` wheel);
``--recovery KEYS`` profiles a worker replaying a KEYS-key changelog instead.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.throughput import load_inputs, workload
from bench.workers import bench_broker, new_names, records_in, start_worker, workdir
from tests.harness import batched, pyspy

RESULTS = Path(__file__).resolve().parent / "results"
#: ["--nonblocking"] samples without pausing the worker (faster, but some stacks come out cut);
#: empty: py-spy pauses it for each sample (slower, whole stacks)
NONBLOCKING: list[str] = []


def record(pid: int, seconds: float, raw: Path) -> None:
    """py-spy samples of every thread of process ``pid`` for ``seconds``, raw stacks to ``raw``."""
    subprocess.run(
        [
            pyspy(),
            "record",
            "--pid",
            str(pid),
            "--idle",
            "--threads",
            "--rate",
            "200",
            "--duration",
            str(int(seconds)),
            "--format",
            "raw",
            "--output",
            str(raw),
            *NONBLOCKING,
        ],
        check=True,
        capture_output=True,
    )


def frame_label(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py)``: line numbers split a function."""
    m = re.match(r"(.*) \((.*?):\d+\)$", frame)
    if not m:
        return frame
    func, path = m.groups()
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if "site-packages" in path or "app" in parts else parts[-1]
    return f"{func} ({short})"


def summarize(collapsed: str, top: int = 25) -> dict[str, Any]:
    """Per thread: its share of samples spent idle (waiting in epoll), and the inclusive and
    self sample shares of its busiest functions, from py-spy's collapsed stacks."""
    threads: dict[str, dict[str, Any]] = {}
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        name = "process"
        if frames[0].startswith("thread ("):
            name = frames.pop(0).split(": ", 1)[-1].rstrip(")") or frames[0]
        t = threads.setdefault(
            name,
            {
                "samples": 0,
                "idle": 0,
                "inclusive": collections.Counter(),
                "self": collections.Counter(),
            },
        )
        t["samples"] += n
        labels = [frame_label(f) for f in frames]
        if labels and labels[-1].startswith("EpollSelector.select"):
            t["idle"] += n
            continue
        for f in set(labels):
            t["inclusive"][f] += n
        if labels:
            t["self"][labels[-1]] += n
    out: dict[str, Any] = {"samples": sum(t["samples"] for t in threads.values()), "threads": {}}
    for name, t in sorted(threads.items(), key=lambda kv: -kv[1]["samples"]):
        total = t["samples"]

        def share(c: Any, total: int = total) -> list[tuple[str, float]]:
            return [(f, round(100 * k / total, 1)) for f, k in c.most_common(top)]

        out["threads"][name] = {
            "samples": total,
            "idle_pct": round(100 * t["idle"] / total, 1),
            "inclusive_pct": share(t["inclusive"]),
            "self_pct": share(t["self"]),
        }
    return out


def profile(
    records: int = 10_000,
    seconds: float = 15.0,
    consultants: int = 1_000,
    env: dict[str, str] | None = None,
    tag: str = "worker",
    batching: bool = False,
    hot_key: bool = False,
) -> dict[str, Any]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker)
        names = batched(names) if batching else names
        if hot_key:
            from bench import hot_key as hot

            data = hot.workload(records, 1)
        else:
            data = workload(records, consultants, 1)
        asyncio.run(load_inputs(broker.bootstrap, names, data, 4))
        w = start_worker(names, folder, name="profiled", **(env or {}))
        w.wait_ready(timeout_s=120)
        assert w.proc is not None
        raw = folder / "stacks.txt"
        started = time.monotonic()
        before = records_in(w)
        record(w.proc.pid, seconds, raw)
        elapsed = time.monotonic() - started
        done = records_in(w) - before
        w.stop()
        collapsed = raw.read_text()
    (RESULTS / f"profile-{tag}.txt").write_text(collapsed)
    out = summarize(collapsed)
    out.update(
        {
            "records_during_profile": done,
            "seconds": round(elapsed, 1),
            "rate_during_profile": round(done / elapsed),
        }
    )
    return out


def profile_recovery(
    keys: int = 300_000, seconds: float = 15.0, tag: str = "recovery"
) -> dict[str, Any]:
    """py-spy on a worker that replays a ``keys``-key mood-history changelog (bench.recovery's)
    from its start: where recovery spends its time."""
    from bench.recovery import TABLE, changelog_records
    from tests.kafka_io import create_topics, produce_bulk

    RESULTS.mkdir(parents=True, exist_ok=True)
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker)
        topic = f"{names.env['ETJ_APP_ID']}-{TABLE}-changelog"
        asyncio.run(create_topics(broker.bootstrap, [topic], 4))
        asyncio.run(
            produce_bulk(broker.bootstrap, changelog_records(topic, keys, 4), 4, exact_end=True)
        )
        w = start_worker(names, folder, name="profiled")
        assert w.proc is not None
        raw = folder / "stacks.txt"
        started = time.monotonic()
        record(w.proc.pid, seconds, raw)
        elapsed = time.monotonic() - started
        w.wait_http_ready(timeout_s=600)
        ready_s = time.monotonic() - started
        w.stop()
        collapsed = raw.read_text()
    (RESULTS / f"profile-{tag}.txt").write_text(collapsed)
    out = summarize(collapsed)
    out.update(
        {
            "keys": keys,
            "seconds": round(elapsed, 1),
            "ready_after_s": round(ready_s, 1),
            "records_during_profile": keys,
            "rate_during_profile": round(keys / ready_s),
        }
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--tag", default="worker")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE worker setting")
    p.add_argument(
        "--batched",
        action="store_true",
        help="the producer's default batching (no ETJ_PRODUCER_MAX_BATCH_SIZE)",
    )
    p.add_argument(
        "--hot-key",
        action="store_true",
        help="bench.hot_key's workload: one consultant with every recommendation",
    )
    p.add_argument(
        "--recovery",
        type=int,
        default=0,
        metavar="KEYS",
        help="profile the replay of a KEYS-key changelog instead of a backlog join",
    )
    a = p.parse_args(argv)
    env = dict(kv.split("=", 1) for kv in a.env)
    r = (
        profile_recovery(a.recovery, a.seconds, tag=a.tag)
        if a.recovery
        else profile(
            a.records, a.seconds, env=env, tag=a.tag, batching=a.batched, hot_key=a.hot_key
        )
    )
    print(
        f"{r['samples']} samples, {r['records_during_profile']} records in {r['seconds']} s "
        f"({r['rate_during_profile']}/s)"
    )
    for name, t in r["threads"].items():
        print(f"\nthread {name}: {t['samples']} samples, {t['idle_pct']}% idle (epoll wait)")
        print("  inclusive % of its samples (busy frames only)")
        for f, pct in t["inclusive_pct"]:
            print(f"    {pct:5.1f}  {f}")
        print("  self %")
        for f, pct in t["self_pct"][:12]:
            print(f"    {pct:5.1f}  {f}")
    (RESULTS / f"profile-{a.tag}.json").write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

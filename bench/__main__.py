"""``python -m bench`` (``make bench``): every benchmark, a table, ``bench/results/latest.json``.

Each benchmark starts its own local broker (or uses ``ETJ_BOOTSTRAP``'s) and real worker
processes, and returns its figures; the headline keys, their goals and the table come from each
module's declaration (``BENCH``, :mod:`bench.harness`). A benchmark that fails is reported as
such (its error in the JSON) and the others still run. Options: ``--quick`` (small sizes, one
run each: checks the harness in ~3 minutes), ``--only NAME[,NAME]``, ``--runs N`` (runs per
figure that takes a median).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import Bench, goals, table
from bench.workers import machine
from tests.leftovers import whole_run

RESULTS = Path(__file__).resolve().parent / "results"
#: the benchmarks of ``make bench``, in the order they run (each module's ``BENCH``)
SUITE = (
    "throughput",
    "car_throughput",
    "movies_throughput",
    "repartition",
    "multi_dimension",
    "avro_throughput",
    "hot_key",
    "hot_dimension",
    "peer_quix",
    "peer_pathway",
    "scale_workers",
    "correction_latency",
    "state_growth",
    "recovery",
    "flow_control",
    "first_answers",
    "zone_fanout",
    "sink_postgres",
    "spark_vs_duckdb",
    "snapshot_restore",
    "bootstrap",
    "image_start",
    "rolling_restart",
    "spark_cluster",
    "chaos",
)


def suite() -> dict[str, Bench]:
    return {name: importlib.import_module(f"bench.{name}").BENCH for name in SUITE}


def main(argv: list[str] | None = None) -> int:
    with whole_run("make bench"):  # SIGTERM or Ctrl-C: nothing of it left running
        return run_suite(argv)


def run_suite(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one run each")
    p.add_argument("--only", default="", help="comma-separated benchmark names")
    p.add_argument("--runs", type=int, default=3, help="runs per median (default 3)")
    p.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    a = p.parse_args(argv)
    benches = suite()
    chosen = [n for n in a.only.split(",") if n] or list(benches)
    unknown = set(chosen) - set(benches)
    if unknown:
        p.error(f"unknown benchmark(s) {sorted(unknown)}; known: {list(benches)}")
    runs = 1 if a.quick else a.runs
    started = time.monotonic()
    where = machine()
    details: dict[str, Any] = {}
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for name in chosen:
        b = benches[name]
        print(f"[bench] {name} ...", flush=True)
        t0 = time.monotonic()
        try:
            details[name] = b.run(**b.suite(a.quick, runs))
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            errors[name] = f"{exc!r}\n{traceback.format_exc(limit=6)}"
            print(f"[bench] {name} FAILED: {exc!r}", file=sys.stderr, flush=True)
        seconds[name] = round(time.monotonic() - t0, 1)
        print(f"[bench] {name} done in {seconds[name]} s", flush=True)
    # every benchmark's keys, those not run (--only) or failed as null
    head = {f.key: f.value(b.name, details) for b in benches.values() for f in b.figures}
    result = {
        **head,
        "machine": {k: v for k, v in where.items() if k != "versions"},
        "cores": where["cores"],
        "versions": where["versions"],
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": a.quick,
        "runs": runs,
        "goals": goals(benches.values()),
        "seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
        "details": details,
        "errors": errors,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print()
    print(table(benches.values(), details, failed=errors))
    m = result["machine"]
    print(
        f"\nmachine: {m['cores']} cores, {m['cpu']}, {m['memory_gb']} GB, load "
        f"{m['load_avg_at_start']} at start; {m['broker']}; "
        + ", ".join(f"{k} {v}" for k, v in where["versions"].items())
    )
    print(f"total {result['seconds']['total']} s; figures in {a.out}")
    if errors:
        print(f"FAILED: {', '.join(errors)} (tracebacks in the JSON)", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m bench`` (``make bench``): every benchmark, a table, ``bench/results/latest.json``.

Each benchmark starts its own local broker (or uses ``ETJ_BOOTSTRAP``'s) and real worker
processes, and returns its figures with the goal they are held against. A benchmark that fails
is reported as such (its error in the JSON) and the others still run. Options:
``--quick`` (small sizes, one run each: checks the harness in ~3 minutes),
``--only NAME[,NAME]``, ``--runs N`` (runs per figure that takes a median).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from bench.workers import machine

RESULTS = Path(__file__).resolve().parent / "results"


def external(module: str, **kwargs: Any) -> dict[str, Any]:
    """Another helper's benchmark module: its ``run(**kwargs)`` (or ``measure``), whatever
    figures it returns; ``ratio`` is looked up under a few names."""
    mod = importlib.import_module(module)
    fn = getattr(mod, "run", None) or getattr(mod, "measure", None)
    if fn is None:
        raise RuntimeError(f"{module} has no run() or measure()")
    out = fn(**kwargs)
    if not isinstance(out, dict):
        raise RuntimeError(f"{module}.{fn.__name__}() returned {type(out).__name__}, not a dict")
    return out


def plan(quick: bool, runs: int) -> dict[str, Callable[[], dict[str, Any]]]:
    from bench import (car_throughput, correction_latency, flow_control, hot_key, recovery,
                       state_growth, throughput)
    from bench import movies_throughput, peer_quix, scale_workers, spark_vs_duckdb

    r = 1 if quick else runs
    return {
        # one-record batches on 10,000 records; default batching on 100,000 (a worker at
        # tens of thousands of records a second needs seconds of backlog to be timed)
        "throughput": lambda: throughput.run(records=3_000 if quick else 10_000, runs=r,
                                             batched_records=20_000 if quick else 100_000),
        # the median of 2 (single runs ranged within ~15 %); the batched rates are goals
        "car_throughput": lambda: car_throughput.run(
            records=3_000 if quick else 10_000, runs=min(r, 2),
            batched_records=20_000 if quick else 100_000),
        "movies_throughput": lambda: movies_throughput.run(
            records=3_000 if quick else 10_000, runs=min(r, 2),
            batched_records=20_000 if quick else 100_000),
        # one consultant with 100,000 recommendations in retention, default batching
        "hot_key": lambda: hot_key.run(recommendations=20_000 if quick else 100_000),
        # one broker, one backlog, etj then Quix with the producer's default batching (the
        # ratio's setting; python -m bench.peer_quix also runs both with one-record batches)
        "peer_quix": lambda: peer_quix.run(records=5_000 if quick else 30_000,
                                           settings=("default",)),
        # one worker, then two, on the same records; the median of 3 (~1.5 min): single runs
        # ranged 1.36-1.86 on the same worker
        "scale_workers": lambda: scale_workers.run(records=4_000 if quick else 20_000,
                                                   runs=1 if quick else 3),
        "correction_latency": lambda: correction_latency.run(
            corrections=300 if quick else 1_000, runs=r),
        "state_growth": lambda: state_growth.run(records=500 if quick else 1_000),
        # 1M keys replay in ~20 s each (+ ~2 s to load them): the median of two runs (three
        # runs of 2026-11-25 spread 27.01-27.31 s)
        "recovery": lambda: recovery.run(keys=100_000 if quick else 1_000_000,
                                         runs=1 if quick else min(r, 2),
                                         rocksdb_restarts=1 if quick else 0),
        "flow_control": lambda: flow_control.run(records=300 if quick else 600,
                                                 retention_ms=60_000),
        "zone_fanout": lambda: external("bench.zone_fanout", **(
            {"large": 100_000, "repeats": 20} if quick else {})),
        # 2M x 200k against DuckDB, then 10x the data on Spark (spark_scaling_ratio); the method
        # that has always been fastest only, and DuckDB not on the large data (its own scaling,
        # context only: python -m bench.spark_vs_duckdb times every method and both engines)
        "spark_vs_duckdb": lambda: external("bench.spark_vs_duckdb", **(
            {"recommendations": 200_000, "moods": 20_000, "consultants": 100, "runs": 1}
            if quick else {}), methods=spark_vs_duckdb.BENCH_METHODS, large_duckdb=False),
        # a new worker's empty disk: from snapshots vs a full replay, 5M keys (quick: 200k)
        "snapshot_restore": lambda: external("bench.snapshot_restore", **(
            {"keys": 200_000} if quick else {})),
        # all three joins under traffic, a fault every 30-60 s; 10 min (quick: 2), then checks
        # with batching: with one-record batches the bundled broker cannot carry the full run
        # (docs/contributing/performance-log.md#chaos-run); the figure says producer_batching
        "chaos": lambda: external("bench.chaos", batching=True,
                                  **({"minutes": 2} if quick else {})),
    }


def summary(d: dict[str, Any]) -> dict[str, Any]:
    """The headline keys of latest.json, from each benchmark's figures (None when it failed)."""
    def get(name: str, key: str) -> Any:
        return (d.get(name) or {}).get(key)

    flow = d.get("flow_control") or {}
    return {
        "throughput_ratio": get("throughput", "ratio"),
        "throughput_rps": get("throughput", "worker_rate"),
        "throughput_batched_rps": get("throughput", "worker_batched_rate"),
        "throughput_batched_ratio": get("throughput", "batched_ratio"),
        "sends_per_record": get("throughput", "sends_per_record"),
        "peer_quix_ratio": get("peer_quix", "ratio"),
        "exact_share_etj": get("peer_quix", "exact_share_etj"),
        "exact_share_quix": get("peer_quix", "exact_share_quix"),
        "scale_2_workers_ratio": get("scale_workers", "ratio"),
        "movies_throughput_rps": get("movies_throughput", "movies_throughput_rps"),
        "car_throughput_rps": get("car_throughput", "car_throughput_rps"),
        "movies_throughput_batched_rps": get("movies_throughput",
                                             "movies_throughput_batched_rps"),
        "car_throughput_batched_rps": get("car_throughput", "car_throughput_batched_rps"),
        "hot_key_rps": get("hot_key", "hot_key_rps"),
        "hot_key_exact_share": get("hot_key", "exact_share"),
        "hot_key_ratio": (round(get("hot_key", "hot_key_rps")
                                / get("throughput", "worker_batched_rate"), 3)
                          if get("hot_key", "hot_key_rps")
                          and get("throughput", "worker_batched_rate") else None),
        "correction_p99_ms": get("correction_latency", "p99_ms"),
        "correction_p50_ms": get("correction_latency", "p50_ms"),
        "correction_pipe_p99_ms": get("correction_latency", "pipe_p99_ms"),
        "correction_p99_overhead_ms": get("correction_latency", "p99_overhead_ms"),
        "state_growth_ratio": get("state_growth", "ratio"),
        "zone_fanout_ratio": get("zone_fanout", "ratio"),
        "spark_vs_duckdb_ratio": get("spark_vs_duckdb", "ratio"),
        "spark_scaling_ratio": get("spark_vs_duckdb", "scaling_ratio"),
        "spark_method": get("spark_vs_duckdb", "method"),
        "snapshot_ready_s_5m_keys": get("snapshot_restore", "snapshot_ready_s_5m_keys"),
        "full_replay_ready_s_5m_keys": get("snapshot_restore", "full_replay_ready_s_5m_keys"),
        "snapshot_speedup": get("snapshot_restore", "snapshot_speedup"),
        "recovery_s_1m_keys": get("recovery", "seconds"),
        "recovery_keys_per_s": get("recovery", "keys_per_s"),
        "corrections_live": flow.get("corrections_live"),
        "corrections_backlog": flow.get("corrections_backlog"),
        "late_live": flow.get("late_live"),
        "late_backlog": flow.get("late_backlog"),
        "corrections_backlog_without_flow_control":
            flow.get("corrections_backlog_without_flow_control"),
        "late_backlog_without_flow_control": flow.get("late_backlog_without_flow_control"),
        "chaos_records": get("chaos", "chaos_records"),
        "chaos_faults": get("chaos", "chaos_faults"),
        "chaos_lost": get("chaos", "chaos_lost"),
        "chaos_wrong": get("chaos", "chaos_wrong"),
        "chaos_gaps": get("chaos", "chaos_gaps"),
        "chaos_rss_growth_ratio": get("chaos", "chaos_rss_growth_ratio"),
        "chaos_rss_growth_ratio_filled": get("chaos", "chaos_rss_growth_ratio_filled"),
        "chaos_minutes": get("chaos", "chaos_minutes"),
    }


#: key -> (goal text, predicate)
GOALS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "throughput_ratio": (">= 0.8", lambda v: v >= 0.8),
    "throughput_batched_ratio": (">= 0.5", lambda v: v >= 0.5),
    "throughput_batched_rps": (">= 40000", lambda v: v >= 40_000),
    "peer_quix_ratio": (">= 1.0", lambda v: v >= 1.0),
    "exact_share_etj": ("1.0", lambda v: v == 1.0),
    "car_throughput_batched_rps": (">= 20000", lambda v: v >= 20_000),
    "movies_throughput_batched_rps": (">= 20000", lambda v: v >= 20_000),
    "hot_key_ratio": (">= 0.8", lambda v: v >= 0.8),
    "hot_key_exact_share": ("1.0", lambda v: v == 1.0),
    "sends_per_record": ("<= 2", lambda v: v <= 2),
    "scale_2_workers_ratio": (">= 1.7", lambda v: v >= 1.7),
    "correction_p99_overhead_ms": ("<= 15", lambda v: v <= 15),
    "correction_p99_ms": ("<= 100", lambda v: v <= 100),
    "state_growth_ratio": ("<= 1.2", lambda v: v <= 1.2),
    "zone_fanout_ratio": ("<= 1.5", lambda v: v <= 1.5),
    "spark_vs_duckdb_ratio": ("<= 2", lambda v: v <= 2),
    "spark_scaling_ratio": ("<= 12", lambda v: v <= 12),
    "recovery_s_1m_keys": ("<= 30", lambda v: v <= 30),
    "snapshot_ready_s_5m_keys": ("<= 30", lambda v: v <= 30),
    "snapshot_speedup": (">= 10", lambda v: v >= 10),
    "chaos_lost": ("0", lambda v: v == 0),
    "chaos_wrong": ("0", lambda v: v == 0),
    "chaos_rss_growth_ratio": ("<= 1.3", lambda v: v <= 1.3),
}


def table(head: dict[str, Any], details: dict[str, Any]) -> str:
    rows = [("figure", "value", "goal", "")]
    for key, value in head.items():
        goal, ok = GOALS.get(key, ("", None))  # type: ignore[arg-type]
        verdict = "" if ok is None or value is None else ("met" if ok(value) else "NOT met")
        rows.append((key, "failed" if value is None else f"{value:g}"
                     if isinstance(value, (int, float)) else str(value), goal, verdict))
    width = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in width))
    t = details.get("throughput") or {}
    if t:
        lines.append(f"\nthroughput, one-record batches both: worker {t['worker_rate']}/s ÷ raw "
                     f"pipe {t['pipe_rate']}/s = {t['ratio']}")
        if "worker_batched_rate" in t:
            lines.append(f"throughput, default batching both: worker {t['worker_batched_rate']}/s"
                         f" ÷ pipe {t['pipe_default_batching_rate']}/s = {t['batched_ratio']}; "
                         f"sends per record {t['sends_per_record']} (one-record run, counted at "
                         f"the broker)")
    pq = details.get("peer_quix") or {}
    if pq:
        each = "; ".join(f"{k}: etj {v['etj_rps']}/s, quix {v['quix_rps']}/s, ratio {v['ratio']}"
                         for k, v in pq["per_setting"].items())
        lines.append(f"peer quix ({pq['records']:,} records, quixstreams {pq['quixstreams']}; "
                     f"peer_quix_ratio under {pq['ratio_setting']} batching): {each}; exact "
                     f"share etj {pq['exact_share_etj']}, quix {pq['exact_share_quix']}")
    sw = details.get("scale_workers") or {}
    if sw:
        lines.append(f"scale ({sw['records']:,} records, {sw['batching']} batching): one worker "
                     f"{sw['one_worker_rps']}/s, two {sw['two_workers_rps']}/s")
    mv = details.get("movies_throughput") or {}
    if mv:
        lines.append(f"movies join ({mv['records']:,} records, one-record batches): "
                     f"{mv['movies_throughput_rps']}/s")
    c = details.get("correction_latency") or {}
    if c:
        lines.append(f"correction latency: p50 {c['p50_ms']} ms, p99 {c['p99_ms']} ms; the same "
                     f"round trip through a raw aiokafka pipe (the floor on this broker): p50 "
                     f"{c.get('pipe_p50_ms')} ms, p99 {c.get('pipe_p99_ms')} ms; the worker adds "
                     f"{c.get('p99_overhead_ms')} ms at p99")
    sp = details.get("spark_vs_duckdb") or {}
    if sp:
        lines.append(f"spark vs duckdb ({sp['recommendations']:,} x {sp['moods']:,}): Spark "
                     f"{sp['spark_s']} s (method {sp['method']}; per method "
                     f"{sp.get('spark_s_per_method')}), DuckDB {sp['duckdb_s']} s"
                     + (f"; {sp['scale']}x the data: Spark {sp['large_spark_s']} s"
                        if "scale" in sp else "")
                     + (f", DuckDB {sp['large_duckdb_s']} s"
                        if sp.get("large_duckdb_s") is not None else ""))
    rec = details.get("recovery") or {}
    if rec:
        lines.append(f"recovery: {rec['keys']:,} keys, {rec['seconds']} s to ready "
                     f"({rec['startup_s']} s of it a start with nothing to recover), "
                     f"{rec['keys_per_s']:,} keys/s"
                     + (f"; RocksDB restart keeping its volume {rec['rocksdb_restart_s']} s"
                        if rec.get("rocksdb_restart_s") else ""))
    f = details.get("flow_control") or {}
    if f:
        lines.append(f"flow control ({f['records']} records, retention {f['retention_s']:g} s): "
                     f"live {f['corrections_live']} corrections / {f['late_live']} late "
                     f"(rules in arrival order: {f['expected_live']}); backlog "
                     f"{f['corrections_backlog']} / {f['late_backlog']} (event-time merge: "
                     f"{f['expected_event_time_merge']}); backlog without flow control "
                     f"{f.get('corrections_backlog_without_flow_control')} / "
                     f"{f.get('late_backlog_without_flow_control')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one run each")
    p.add_argument("--only", default="", help="comma-separated benchmark names")
    p.add_argument("--runs", type=int, default=3, help="runs per median (default 3)")
    p.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    a = p.parse_args(argv)
    benches = plan(a.quick, a.runs)
    chosen = [n for n in a.only.split(",") if n] or list(benches)
    unknown = set(chosen) - set(benches)
    if unknown:
        p.error(f"unknown benchmark(s) {sorted(unknown)}; known: {list(benches)}")
    started = time.monotonic()
    where = machine()
    details: dict[str, Any] = {}
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for name in chosen:
        print(f"[bench] {name} ...", flush=True)
        t0 = time.monotonic()
        try:
            details[name] = benches[name]()
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            errors[name] = f"{exc!r}\n{traceback.format_exc(limit=6)}"
            print(f"[bench] {name} FAILED: {exc!r}", file=sys.stderr, flush=True)
        seconds[name] = round(time.monotonic() - t0, 1)
        print(f"[bench] {name} done in {seconds[name]} s", flush=True)
    head = summary(details)
    result = {**head, "machine": {k: v for k, v in where.items() if k != "versions"},
              "cores": where["cores"], "versions": where["versions"],
              "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "quick": a.quick, "runs": 1 if a.quick else a.runs,
              "goals": {k: g for k, (g, _) in GOALS.items()},
              "seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
              "details": details, "errors": errors}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print()
    print(table(head, details))
    m = result["machine"]
    print(f"\nmachine: {m['cores']} cores, {m['cpu']}, {m['memory_gb']} GB, load "
          f"{m['load_avg_at_start']} at start; {m['broker']}; "
          + ", ".join(f"{k} {v}" for k, v in where["versions"].items()))
    print(f"total {result['seconds']['total']} s; figures in {a.out}")
    if errors:
        print(f"FAILED: {', '.join(errors)} (tracebacks in the JSON)", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())

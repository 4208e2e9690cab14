"""etj against a peer: the mood join in Quix Streams (``join_asof``), same broker, same records.

One broker holds one out-of-order backlog (``sample-traffic``'s generator: jittered arrivals, a
share of moods 20 s of event time late). etj (one worker) and Quix Streams (one app process,
``bench/quix_peer_app.py``) each read all of it with their own group, one after the other, under
the same producer setting; twice: the producer's default batching, then one-record batches
(``make bench``: the default only, the setting of ``peer_quix_ratio``).

- Rate = input records ÷ seconds from the first input handled (etj: its first ``records_in``
  on /stats/ or its first output, whichever is earlier; Quix: its first processed message) to
  the last output readable (etj: its last revision; Quix: its output for the last
  recommendation), the outputs read as they come by a reader that stamps their arrival (tansu
  under-reports end offsets of batches: done is counted from what is read, not end offsets).
- Exactness: each one's final answer per recommendation (etj: its highest revision; Quix: its
  one output) against ``tests.oracle.exact_mood_answer`` (brute force, shares no code).

Quix Streams runs in its own venv (``var/bench/quix-venv``, created on first use with
``pip install quixstreams==3.28.*``), so its confluent-kafka and rocksdict never meet etj's pins.

``python -m bench.peer_quix [--records N] [--consultants C]``
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import Bench, Figure
from bench.throughput import load_inputs, workload
from bench.workers import bench_broker, new_names, reading_from, start_worker, stats, workdir
from tests.harness import LOCAL_SETTINGS, Names, batched
from tests.kafka_io import Got, OutputWatch, create_topics
from tests.oracle import exact_mood_answer, mood_answer

RATIO = Figure(
    "peer_quix_ratio", "ratio", 2.0, note="etj's rate ÷ Quix Streams', default batching both"
)
EXACT_ETJ = Figure(
    "exact_share_etj", goal=1.0, direction="==", note="final answers equal to the oracle's"
)
EXACT_QUIX = Figure("exact_share_quix", note="the same for Quix (no corrections)")

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "var" / "bench" / "quix-venv"
REQUIREMENT = "quixstreams==3.28.*"
APP = Path(__file__).resolve().with_name("quix_peer_app.py")
SETTINGS = ("default", "one-record")  # producer batching, the same for both

#: how the Quix app differs from etj's mood join (also in docs/contributing/performance-log.md)
DIFFERENCES = [
    "no corrections: a mood that arrives after a recommendation it should have joined never "
    "revises Quix's output (etj emits a new revision); exact_share_* measures the cost",
    "join_asof matches at-or-before; the recommendations' timestamp is their event time - 1 ms, "
    "which makes it strictly before (etj's rule) for integer milliseconds",
    "ties on a mood's event time: Quix keeps the last one stored, etj the greatest mood "
    "(the workload has no ties: every record has its own event time)",
    "grace_ms = etj's retention (1 h): moods older than the newest of their consultant minus it "
    "are expired; etj sends records older than its horizon to etj-late instead",
    "Quix writes one output per recommendation to its own topic, etj revisions (revision 1, "
    "then corrections) with bookkeeping fields; both carry the fields tests/oracle.py compares",
    "one shim: tansu's DescribeConfigs lacks retention.ms, read unguarded by Quix's "
    "TopicManager.derive_topic_config (patched in bench/quix_peer_app.py only)",
    "Quix at-least-once with its default 5 s checkpoints (its state changelog is written at "
    "a checkpoint, so mostly after the last output timed here) and idempotent producer; etj "
    "at-least-once, its changelog written and acknowledged before offsets are committed",
]


def quix_python() -> tuple[Path, str]:
    """The peer venv's python (created and installed on first use) and Quix's version."""
    py = VENV / "bin" / "python"
    probe = [str(py), "-c", "import quixstreams; print(quixstreams.__version__)"]
    if py.exists():
        got = subprocess.run(probe, capture_output=True, text=True)
        if got.returncode == 0:
            return py, got.stdout.strip()
    VENV.parent.mkdir(parents=True, exist_ok=True)
    print(f"[bench] creating {VENV} ({REQUIREMENT}) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", REQUIREMENT], capture_output=True, text=True
    )
    if pip.returncode:
        raise RuntimeError(f"pip install {REQUIREMENT} failed:\n{pip.stdout}{pip.stderr}"[-3000:])
    return py, subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()


def exact_share(outputs: list[Got], exact: dict[str, tuple[Any, ...]]) -> float:
    """Share of recommendations whose final output (highest revision) is the oracle's."""
    final: dict[str, dict[str, Any]] = {}
    for o in outputs:
        r = o.json()
        if r["id"] not in final or r.get("revision", 1) >= final[r["id"]].get("revision", 1):
            final[r["id"]] = r
    return sum(
        1 for jid, ans in exact.items() if jid in final and mood_answer(final[jid]) == ans
    ) / len(exact)


def ids(outputs: list[Got]) -> int:
    return len({o.json()["id"] for o in outputs})


def run_etj(
    bootstrap: str,
    names: Names,
    folder: Path,
    expected: int,
    recs: int,
    batching: str,
    timeout_s: float = 600,
) -> dict[str, Any]:
    """One etj worker on the backlog: (seconds first input → last revision, outputs)."""
    inputs = [names.moods_topic, names.events_topic]
    w = start_worker(
        batched(names) if batching == "default" else names, folder, name=f"etj-{batching}"
    )
    try:
        with OutputWatch(bootstrap, [names.output_topic]) as watch:
            first_in, deadline = None, time.monotonic() + timeout_s
            while True:
                n = sum((stats(w).get("records_in") or {}).get(t, 0) for t in inputs)
                if n and first_in is None:
                    first_in = time.time()
                if n >= expected:
                    break
                if w.proc is not None and w.proc.poll() is not None:
                    raise RuntimeError(f"etj exited {w.proc.returncode}:\n{w.log()[-3000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"etj consumed {n} of {expected}")
                time.sleep(0.05)
            got = watch.wait(lambda outs: ids(outs) >= recs, timeout_s=120, idle_s=1.5)
    finally:
        w.stop()
    outs = [g for _, g in got]
    start = min(first_in or time.time(), min(o.timestamp_ms for o in outs) / 1000)
    return {"seconds": got[-1][0] - start, "outputs": outs}


def run_quix(
    py: Path,
    bootstrap: str,
    names: Names,
    folder: Path,
    recs: int,
    batching: str,
    partitions: int,
    timeout_s: float = 600,
) -> dict[str, Any]:
    """The Quix app on the backlog: (seconds first message processed → last output, outputs)."""
    out_topic = f"{names.prefix}-quix-{batching}"
    asyncio.run(create_topics(bootstrap, [out_topic], partitions))
    cfg = {
        "broker": bootstrap,
        "group": f"{names.prefix}-quix-{batching}",
        "moods": names.moods_topic,
        "events": names.events_topic,
        "output": out_topic,
        "state_dir": str(folder / f"quix-{batching}-state"),
        "batching": batching,
        "fetch_wait_ms": LOCAL_SETTINGS["consumer_fetch_max_wait_ms"],
        "grace_ms": int(names.env.get("ETJ_RETENTION_MS", 3_600_000)),
    }
    log = folder / f"quix-{batching}.log"

    with log.open("ab") as f:
        proc = subprocess.Popen(
            [str(py), str(APP), json.dumps(cfg)],
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
        )

    def alive() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"quix exited {proc.returncode}:\n{log.read_text()[-3000:]}")

    try:
        with OutputWatch(bootstrap, [out_topic]) as watch:
            got = watch.wait(lambda outs: ids(outs) >= recs, timeout_s=timeout_s, alive=alive)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    first = [
        int(line.split("=", 1)[1])
        for line in log.read_text().splitlines()
        if line.startswith("first_processed_ms=")
    ]
    if not first:
        raise RuntimeError(f"quix printed no first_processed_ms:\n{log.read_text()[-3000:]}")
    return {"seconds": got[-1][0] - first[0] / 1000, "outputs": [g for _, g in got]}


def run(
    records: int = 30_000,
    consultants: int = 100,
    seed: int = 1,
    partitions: int = 4,
    settings: tuple[str, ...] = SETTINGS,
) -> dict[str, Any]:
    """Both engines under each producer setting, one broker, one backlog."""
    py, version = quix_python()
    data = workload(records, consultants, seed)
    exact = exact_mood_answer(data)
    recs = len(exact)
    per: dict[str, dict[str, Any]] = {}
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker, partitions=partitions)
        asyncio.run(load_inputs(broker.bootstrap, names, data, partitions))
        for batching in settings:
            own = reading_from(
                new_names(broker, partitions=partitions), names, "moods_topic", "events_topic"
            )
            etj = run_etj(broker.bootstrap, own, folder, records, recs, batching)
            quix = run_quix(py, broker.bootstrap, own, folder, recs, batching, partitions)
            per[batching] = {
                "etj_rps": round(records / etj["seconds"]),
                "quix_rps": round(records / quix["seconds"]),
                "ratio": round(quix["seconds"] / etj["seconds"], 3),
                "exact_share_etj": round(exact_share(etj["outputs"], exact), 4),
                "exact_share_quix": round(exact_share(quix["outputs"], exact), 4),
                "etj_outputs": len(etj["outputs"]),
                "quix_outputs": len(quix["outputs"]),
                "etj_corrections": sum(
                    1 for o in etj["outputs"] if o.json().get("revision", 1) > 1
                ),
            }
    head = per[settings[0]]
    return {
        "name": "peer_quix",
        "quixstreams": version,
        "records": records,
        "recommendations": recs,
        "consultants": consultants,
        "partitions": partitions,
        "ratio_setting": settings[0],
        "ratio": head["ratio"],
        "exact_share_etj": head["exact_share_etj"],
        "exact_share_quix": head["exact_share_quix"],
        "ratio_one_record": (per.get("one-record") or {}).get("ratio"),
        "per_setting": per,
        "differences": DIFFERENCES,
    }


def report(pq: dict[str, Any]) -> str:
    each = "; ".join(
        f"{k}: etj {v['etj_rps']}/s, quix {v['quix_rps']}/s, ratio {v['ratio']}"
        for k, v in pq["per_setting"].items()
    )
    return (
        f"peer quix ({pq['records']:,} records, quixstreams {pq['quixstreams']}; "
        f"peer_quix_ratio under {pq['ratio_setting']} batching): {each}; exact share etj "
        f"{pq['exact_share_etj']}, quix {pq['exact_share_quix']}"
    )


BENCH = Bench(
    "peer_quix",
    run,
    (RATIO, EXACT_ETJ, EXACT_QUIX),
    report=report,
    # one broker, one backlog, etj then Quix with the producer's default batching (the
    # ratio's setting; python -m bench.peer_quix also runs both with one-record batches)
    suite=lambda quick, runs: {"records": 5_000 if quick else 30_000, "settings": ("default",)},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

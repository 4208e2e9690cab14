"""etj against a peer that corrects itself: the mood join in Pathway (``asof_join``), same
broker, same records as ``bench.peer_quix``.

One broker holds one out-of-order backlog (``sample-traffic``'s generator, as
``bench.peer_quix``: jittered arrivals, a share of moods late). etj (one worker, the producer's
default batching) and Pathway 0.33 (one process, ``bench/pathway_peer_app.py``) each read all
of it with their own group, one after the other.

- Rate = input records ÷ seconds from the first input handled (etj: its first ``records_in``
  or first output, as in ``bench.peer_quix``; Pathway: the first input row its engine saw,
  ``pw.io.subscribe``) to **every final answer readable**: etj's last revision; Pathway's
  output is an update stream (a row with ``diff`` +1 inserted, −1 retracted) and a
  recommendation's final answer is its row whose diffs sum to +1, so its time is that of the
  last output message once every recommendation has an answer and nothing more came for a
  while (its retractions and re-insertions included).
- Exactness: each one's final answer per recommendation against ``tests.oracle``.

``peer_pathway_ratio`` = Pathway's seconds ÷ etj's (goal ≥ 5). Pathway runs in its own venv
(``var/bench/pathway-venv``, created on first use with ``pip install pathway==0.33.0``).

``python -m bench.peer_pathway [--records N] [--consultants C]``
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
from bench.peer_quix import exact_share as etj_exact_share
from bench.peer_quix import run_etj
from bench.throughput import load_inputs, workload
from bench.workers import bench_broker, new_names, reading_from, workdir
from tests.harness import LOCAL_SETTINGS, Names
from tests.kafka_io import Got, OutputWatch, create_topics
from tests.oracle import exact_mood_answer, mood_answer

RATIO = Figure(
    "peer_pathway_ratio",
    "ratio",
    5.0,
    note="Pathway's seconds to every final answer ÷ etj's, same records and broker",
)
EXACT_ETJ = Figure(
    "exact_share_etj_vs_pathway",
    "exact_share_etj",
    goal=1.0,
    direction="==",
    note="etj's final answers exact (the same run as Pathway's)",
)
EXACT_PATHWAY = Figure("exact_share_pathway", note="Pathway's final answers (diffs summed) exact")

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "var" / "bench" / "pathway-venv"
REQUIREMENT = "pathway==0.33.0"
APP = Path(__file__).resolve().with_name("pathway_peer_app.py")

#: how the Pathway app differs from etj's mood join (also in the result)
DIFFERENCES = [
    "asof_join backward matches at-or-before; the recommendations' time is their event time "
    "- 1 ms, which makes it strictly before (etj's rule) for integer milliseconds",
    "ties on a mood's event time: not defined by etj's rule in Pathway (the workload has none)",
    "Pathway keeps every row (no behavior: nothing forgotten, no lateness bound); etj keeps its "
    "retention (1 h) and sends older records to etj-late",
    "Pathway's output is an update stream (rows with diff +1 and -1, no revision numbers); a "
    "final answer is a recommendation's row whose diffs sum to +1; etj writes revisions",
    "Pathway's Kafka reader closes a minibatch every 100 ms here (its default: 1,500 ms), "
    "etj's consumer waits up to 100 ms for a fetch (the bundled broker's setting)",
    "one Pathway worker thread (PATHWAY_THREADS=1), as etj runs one worker (one core)",
    "no persistence configured in Pathway (a restart reads from the start); etj writes and "
    "acknowledges its changelog before offsets are committed",
]


def pathway_python() -> tuple[Path, str]:
    """The peer venv's python (created and installed on first use) and Pathway's version."""
    py = VENV / "bin" / "python"
    probe = [str(py), "-c", "import pathway; print(pathway.__version__)"]
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


def final_rows(outputs: list[Got]) -> dict[str, dict[str, Any]]:
    """Per recommendation, the row whose diffs sum to +1 (an update stream's final state)."""
    net: dict[tuple[str, str], int] = {}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for o in outputs:
        r = o.json()
        diff = int(r.pop("diff", 1))
        r.pop("time", None)
        r["id"] = r.pop("rec_id", None)
        k = (r["id"], json.dumps(r, sort_keys=True))
        net[k] = net.get(k, 0) + diff
        rows[k] = r
    return {jid: rows[(jid, body)] for (jid, body), n in net.items() if n == 1}


def pathway_exact_share(outputs: list[Got], exact: dict[str, tuple[Any, ...]]) -> float:
    final = final_rows(outputs)
    return sum(
        1 for jid, ans in exact.items() if jid in final and mood_answer(final[jid]) == ans
    ) / len(exact)


def run_pathway(
    py: Path,
    bootstrap: str,
    names: Names,
    folder: Path,
    recs: int,
    partitions: int,
    timeout_s: float = 900,
    idle_s: float = 3.0,
) -> dict[str, Any]:
    """The Pathway app on the backlog: seconds from its first input row to the last output
    message (every recommendation answered, then nothing for ``idle_s``), and the outputs."""
    out_topic = f"{names.prefix}-pathway"
    asyncio.run(create_topics(bootstrap, [out_topic], partitions))
    cfg = {
        "broker": bootstrap,
        "group": f"{names.prefix}-pathway",
        "moods": names.moods_topic,
        "events": names.events_topic,
        "output": out_topic,
        "fetch_wait_ms": LOCAL_SETTINGS["consumer_fetch_max_wait_ms"],
        "autocommit_ms": 100,
    }
    log = folder / "pathway.log"
    env = {**os.environ, "PATHWAY_THREADS": "1"}
    with log.open("ab") as f:
        proc = subprocess.Popen(
            [str(py), str(APP), json.dumps(cfg)],
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
            env=env,
        )

    def alive() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"pathway exited {proc.returncode}:\n{log.read_text()[-3000:]}")

    def answered(outs: list[Got]) -> bool:
        return len(final_rows(outs)) >= recs

    cpu0 = None
    try:
        with OutputWatch(bootstrap, [out_topic]) as watch:
            got = watch.wait(answered, timeout_s=timeout_s, idle_s=idle_s, alive=alive)
        cpu0 = _cpu_s(proc.pid)
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
        if line.startswith("first_input_ms=")
    ]
    if not first:
        raise RuntimeError(f"pathway printed no first_input_ms:\n{log.read_text()[-3000:]}")
    return {
        "seconds": got[-1][0] - first[0] / 1000,
        "outputs": [g for _, g in got],
        "cpu_s": cpu0,
    }


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a running process (its whole life so far), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run(
    records: int = 30_000, consultants: int = 100, seed: int = 1, partitions: int = 4
) -> dict[str, Any]:
    """etj, then Pathway, on one backlog (the producer's default batching for etj)."""
    py, version = pathway_python()
    data = workload(records, consultants, seed)
    exact = exact_mood_answer(data)
    recs = len(exact)
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker, partitions=partitions)
        asyncio.run(load_inputs(broker.bootstrap, names, data, partitions))
        own = reading_from(
            new_names(broker, partitions=partitions), names, "moods_topic", "events_topic"
        )
        t0 = time.monotonic()
        etj = run_etj(broker.bootstrap, own, folder, records, recs, "default")
        etj_wall = time.monotonic() - t0
        own = reading_from(
            new_names(broker, partitions=partitions), names, "moods_topic", "events_topic"
        )
        pathway = run_pathway(py, broker.bootstrap, own, folder, recs, partitions)
    return {
        "name": "peer_pathway",
        "pathway": version,
        "records": records,
        "recommendations": recs,
        "consultants": consultants,
        "partitions": partitions,
        "etj_rps": round(records / etj["seconds"]),
        "pathway_rps": round(records / pathway["seconds"]),
        "ratio": round(pathway["seconds"] / etj["seconds"], 3),
        "exact_share_etj": round(etj_exact_share(etj["outputs"], exact), 4),
        "exact_share_pathway": round(pathway_exact_share(pathway["outputs"], exact), 4),
        "etj_outputs": len(etj["outputs"]),
        "pathway_outputs": len(pathway["outputs"]),
        "pathway_retractions": sum(1 for o in pathway["outputs"] if o.json().get("diff") == -1),
        "pathway_cpu_s": pathway["cpu_s"],
        "etj_wall_s_with_start": round(etj_wall, 1),
        "differences": DIFFERENCES,
    }


def report(pp: dict[str, Any]) -> str:
    return (
        f"peer pathway ({pp['records']:,} records, pathway {pp['pathway']}): etj "
        f"{pp['etj_rps']}/s, pathway {pp['pathway_rps']}/s to every final answer, ratio "
        f"{pp['ratio']}; exact share etj {pp['exact_share_etj']}, pathway "
        f"{pp['exact_share_pathway']} ({pp['pathway_retractions']} retractions)"
    )


BENCH = Bench(
    "peer_pathway",
    run,
    (RATIO, EXACT_ETJ, EXACT_PATHWAY),
    report=report,
    # one broker, one backlog, etj then Pathway
    suite=lambda quick, runs: {"records": 5_000 if quick else 30_000},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

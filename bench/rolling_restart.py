"""A rolling restart of two worker containers under live traffic, as a StatefulSet rollout does
it: how long a partition went unanswered and how long the views answered 503
(docs/operating/scaling.md#rolling-restarts).

The scenario and what each figure is: ``tests/image/rollout.py`` (the image tier's
``test_rolling_restart.py`` runs it once and checks it exact; here each run is checked exact
too). Containers of the image, run from the chart's StatefulSet as the image tier runs them, on
the bundled broker (tansu): dynamic membership there, as the tier runs it, since tansu never
answers a static member coming back with a Faust worker's metadata
(``tests/broker/test_static_membership.py``); and tansu holds every JoinGroup for half the
session timeout (10 s): each rebalance costs 5 s of it, and a rollout takes two per pod. The
figure is the median over the runs.

``python -m bench.rolling_restart [--runs R]``
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import Bench, Figure
from bench.workers import bench_broker
from tests.harness import make_names
from tests.image import base_image, project_image
from tests.image.containers import Container, new_volume, start_container
from tests.image.engine import Engine
from tests.image.rollout import Rollout, rolling_restart

#: before static membership and the readiness change (3 runs): 12.2, 13.1, 11.2 s; the goal is
#: the best of them (docs/operating/scaling.md#rolling-restarts)
GAP = Figure(
    "rolling_restart_gap_s",
    goal=11.2,
    direction="<=",
    unit="s",
    note="the longest a partition went unanswered while its inputs came (2 pods, tansu)",
)
READY_503 = Figure(
    "rolling_restart_ready_503_s",
    goal=0,
    direction="==",
    unit="s",
    note="/ready/ not 200 on the pod the rollout was not restarting",
)
VIEW_503 = Figure(
    "rolling_restart_view_503_s",
    unit="s",
    note="the longest a key's view went unanswered through the Service",
)


def one_rollout(engine: Engine, image: str, broker_url: str, folder: Path) -> Rollout:
    names = make_names(broker_url)
    started: list[Container] = []

    def start(pod: str, volume: str | None, web_port: int | None) -> Container:
        volume = volume or new_volume(engine, f"{names.prefix}-{pod}")
        n = sum(1 for c in started if c.pod == pod)
        c = start_container(engine, image, names, pod, folder, volume, None, n, web_port)
        started.append(c)
        return c

    try:
        return asyncio.run(rolling_restart(start, names, record=folder / "rollout.json"))
    finally:
        for c in started:
            c.remove()
        engine.run("volume", "rm", "-f", *{c.volume for c in started}, check=False)


def run(runs: int = 3) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="etj-bench-rollout-"))
    engine = Engine(folder / "dockerd").start()
    each: list[Rollout] = []
    try:
        base, _ = base_image.ensure(engine, folder / "base")
        image = project_image.build(engine, base).tag
        with bench_broker() as broker:
            for i in range(runs):
                each.append(one_rollout(engine, image, broker.url, folder / f"run{i}"))
                print(f"[bench] rolling_restart run {i + 1}: {each[-1].summary()}", flush=True)
    finally:
        engine.stop()
    return {
        "name": "rolling_restart",
        "runs": runs,
        "image": image,
        "rolling_restart_gap_s": round(statistics.median(r.gap_s for r in each), 1),
        "rolling_restart_ready_503_s": round(statistics.median(r.ready_503_s for r in each), 1),
        "rolling_restart_view_503_s": round(statistics.median(r.view_503_s for r in each), 1),
        "each_run": [
            {
                "gap_s": round(r.gap_s, 1),
                "steady_gap_s": round(r.steady_gap_s, 1),
                "ready_503_s": round(r.ready_503_s, 1),
                "view_503_s": round(r.view_503_s, 1),
                "gap_by_partition": {p: round(g, 1) for p, g in r.gap_by_partition.items()},
                "restarts": r.restarts,
                "records": r.records,
            }
            for r in each
        ],
    }


BENCH = Bench(
    "rolling_restart",
    run,
    (GAP, READY_503, VIEW_503),
    suite=lambda quick, runs: {"runs": 1 if quick else runs},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

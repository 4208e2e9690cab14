"""The batch twin on a cluster of containers beside ``local[*]`` on the same host: ``bootstrap``
keys/s and ``reconcile`` records/s, with 1 and then 2 workers.

The cluster is the test's (tests/spark/container_cluster.py): a standalone master and workers
of one core each, containers of the node image (Java 17, Python 3.11, Spark; nothing of etj) on
the host's network, the driver on the host in client mode, every job sent with
``python -m app.batch pack-env``'s archive (docs/batch/cluster.md). ``local[*]`` is
``python -m app.batch --master local[*]`` on the same host: Spark in the driver's process, all
its cores. The host has 2 cores: 2 one-core workers use them all, as ``local[*]`` does, and the
driver, the broker (tansu) and the executors share them.

- **bootstrap**: a movie catalogue of ``keys`` keys (Parquet) -> 4 partitions of the movies
  table's changelog and snapshots (``file://`` on the shared folder); each run a new app id.
  Keys/s is over the job's own time (the ``bootstrap … N s`` it prints: from its broker checks
  to the marker ``done``, so the executors' start and the archive's unpacking are in it, the
  driver's start is not).
- **reconcile**: the mood join over ``events`` events, ``events // 10`` moods of 1,000
  consultants and a converged revision log of ``events`` revisions (the exact answer, made once
  in-process, not timed). Records/s = (moods + events + revisions) / the job's own time (its
  last step line).
- ``wall_s`` of each: the whole command, spark-submit or ``python -m app.batch`` (JVM, executors
  and, on the cluster, the archive included).

Each figure is the median of ``runs`` runs. No goal: the figures say what a cluster of
containers on one host costs against ``local[*]``, and how the work spreads from 1 to 2
workers, on this machine. ``python -m bench.spark_cluster [--keys N] [--events N] [--runs R]``
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import Bench, Figure
from bench.workers import bench_broker, new_names, workdir
from tests.kafka_io import create_topics

PARTITIONS = 4
JOB = re.compile(r"bootstrap \w+: ([\d,]+) keys of movies .*?, ([\d.]+) s;")
STEP = re.compile(r"\[etj-reconcile\s+([\d.]+)s\]")

BOOT_2 = Figure(
    "cluster_bootstrap_keys_per_s",
    "cluster_2w_bootstrap_keys_per_s",
    unit="keys/s",
    note="container cluster, 2 one-core workers, archive sent",
)
BOOT_1 = Figure(
    "cluster_bootstrap_keys_per_s_1w",
    "cluster_1w_bootstrap_keys_per_s",
    unit="keys/s",
    note="the same, 1 worker",
)
BOOT_L = Figure(
    "local_bootstrap_keys_per_s",
    "local_bootstrap_keys_per_s",
    unit="keys/s",
    note="local[*] on the same host",
)
REC_2 = Figure(
    "cluster_reconcile_records_per_s",
    "cluster_2w_reconcile_records_per_s",
    unit="records/s",
    note="container cluster, 2 one-core workers",
)
REC_1 = Figure(
    "cluster_reconcile_records_per_s_1w",
    "cluster_1w_reconcile_records_per_s",
    unit="records/s",
    note="the same, 1 worker",
)
REC_L = Figure(
    "local_reconcile_records_per_s",
    "local_reconcile_records_per_s",
    unit="records/s",
    note="local[*] on the same host",
)


def reconcile_inputs(folder: Path, events: int) -> tuple[list[str], int]:
    """(the reconcile arguments, records read): moods and events as Parquet datasets
    (bench.spark_vs_duckdb's generator), and the revision log of the exact answer (made by
    ``exact`` in-process, then given revision 1)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.spark_vs_duckdb import make_data

    moods_n = max(1, events // 10)
    moods, recs = make_data(folder / "data", events, moods_n, 1000, seed=5)
    answer = folder / "answer.parquet"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.batch",
            "exact",
            "--moods",
            moods,
            "--events",
            recs,
            "--out",
            str(answer),
            "--master",
            "local[*]",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"exact failed:\n{done.stdout}\n{done.stderr[-4000:]}")
    table = pq.read_table(answer)
    n = table.num_rows
    table = (
        table.append_column("revision", pa.array([1] * n, pa.int64()))
        .append_column("previous_mood", pa.nulls(n, pa.string()))
        .append_column("cause", pa.array(["arrival"] * n, pa.string()))
    )
    revisions = folder / "revisions.parquet"
    pq.write_table(table, revisions)
    return (
        ["--moods", moods, "--events", recs, "--revisions", str(revisions)],
        moods_n + events + n,
    )


def job_seconds(kind: str, text: str) -> float:
    if kind == "bootstrap":
        m = JOB.search(text)
        if not m:
            raise RuntimeError(f"no bootstrap line in:\n{text[-3000:]}")
        return float(m.group(2))
    steps = [float(x) for x in STEP.findall(text)]
    if not steps:
        raise RuntimeError(f"no step line in:\n{text[-3000:]}")
    return max(steps)


def run_local(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "app.batch", *args, "--master", "local[*]"],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.monotonic() - t0
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{args[0]} failed:\n{done.stdout}\n{done.stderr[-4000:]}")
    return wall, done.stdout + done.stderr


def run_cluster(
    cluster: Any,
    args: list[str],
    env: dict[str, str],
    pack: str,
) -> tuple[float, str]:
    t0 = time.monotonic()
    done = cluster.submit(
        args,
        env=env,
        archives=[f"{pack}#etj-env"],
        timeout_s=3600,
        conf={
            "spark.pyspark.python": "./etj-env/bin/python",
            "spark.executor.memory": "1g",
            "spark.sql.shuffle.partitions": str(4 * cluster.workers),
        },
    )
    wall = time.monotonic() - t0
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return wall, done.stdout + done.stderr


def measure(
    where: str,
    broker: Any,
    folder: Path,
    catalogue: str,
    keys: int,
    reconcile: list[str],
    records: int,
    runs: int,
    cluster: Any = None,
    pack: str = "",
) -> dict[str, Any]:
    """Median bootstrap and reconcile figures of ``runs`` runs on one place."""
    each = []
    for i in range(runs):
        names = new_names(broker)
        url = f"file://{folder}/snapshots-{where}-{i}"
        env = {
            **names.env,
            "ETJ_STORE_URL": "rocksdb://",
            "ETJ_SNAPSHOT_URL": url,
            "ETJ_BUILTIN_JOINS": "movies",
            "ETJ_PARTITIONS": str(PARTITIONS),
        }
        asyncio.run(
            create_topics(broker.bootstrap, [names.movies_topic, names.ratings_topic], PARTITIONS)
        )
        boot = [
            "bootstrap",
            "--join",
            "movies",
            "--dimension",
            catalogue,
            "--no-progress",
            "--wait-group-s",
            "0",
        ]
        rec = ["reconcile", *reconcile]
        runner = (
            (lambda a, e: run_local(a, {**os.environ, **e}))
            if cluster is None
            else (lambda a, e: run_cluster(cluster, a, e, pack))
        )
        boot_wall, boot_text = runner(boot, env)
        rec_wall, rec_text = runner(rec, {})
        boot_s, rec_s = job_seconds("bootstrap", boot_text), job_seconds("reconcile", rec_text)
        each.append(
            {
                "bootstrap_s": boot_s,
                "bootstrap_wall_s": boot_wall,
                "reconcile_s": rec_s,
                "reconcile_wall_s": rec_wall,
            }
        )
        print(
            f"[bench] spark_cluster {where} run {i + 1}: bootstrap {boot_s:.1f} s "
            f"(wall {boot_wall:.1f}), reconcile {rec_s:.1f} s (wall {rec_wall:.1f})",
            flush=True,
        )
    med = {k: statistics.median(r[k] for r in each) for k in each[0]}
    return {
        f"{where}_bootstrap_keys_per_s": round(keys / med["bootstrap_s"]),
        f"{where}_reconcile_records_per_s": round(records / med["reconcile_s"]),
        where: {
            **{k: round(v, 1) for k, v in med.items()},
            "each_run": [{k: round(v, 1) for k, v in r.items()} for r in each],
        },
    }


def run(keys: int = 1_000_000, events: int = 2_000_000, runs: int = 1) -> dict[str, Any]:
    from app.batch.pack import pack as pack_env
    from bench.bootstrap import write_catalogue
    from tests.image.engine import Engine
    from tests.spark import node_image
    from tests.spark.container_cluster import ContainerCluster

    t0 = time.monotonic()
    with bench_broker() as broker, workdir() as folder:
        catalogue = folder / "catalogue.parquet"
        write_catalogue(catalogue, keys)
        reconcile, records = reconcile_inputs(folder, events)
        packed = pack_env(folder / "etj-executor-env.tar.gz")
        prepared_s = time.monotonic() - t0
        result: dict[str, Any] = measure(
            "local", broker, folder, str(catalogue), keys, reconcile, records, runs
        )
        engine = Engine(folder / "dockerd").start()
        try:
            image = node_image.ensure(engine, folder / "image")
            for workers in (1, 2):
                cluster = ContainerCluster(
                    engine,
                    image.tag,
                    folder,
                    folder / f"cluster-{workers}",
                    workers=workers,
                    memory_per_worker="2g",
                ).start()
                try:
                    result.update(
                        measure(
                            f"cluster_{workers}w",
                            broker,
                            folder,
                            str(catalogue),
                            keys,
                            reconcile,
                            records,
                            runs,
                            cluster,
                            str(packed.path),
                        )
                    )
                finally:
                    cluster.stop()
        finally:
            engine.stop()
    two, one = result["cluster_2w"], result["cluster_1w"]
    return {
        "name": "spark_cluster",
        "keys": keys,
        "events": events,
        "reconcile_records": records,
        "runs": runs,
        "cores": os.cpu_count(),
        "node_image": image.tag,
        "pack_mb": round(packed.packed_bytes / 1e6, 1),
        "pack_s": round(packed.seconds, 1),
        "prepare_s": round(prepared_s, 1),
        "bootstrap_speedup_1w_to_2w": round(one["bootstrap_s"] / two["bootstrap_s"], 2),
        "reconcile_speedup_1w_to_2w": round(one["reconcile_s"] / two["reconcile_s"], 2),
        **result,
    }


def report(r: dict[str, Any]) -> str:
    rows = [("", "bootstrap keys/s", "job s", "wall s", "reconcile rec/s", "job s", "wall s")]
    for where, label in (
        ("local", "local[*]"),
        ("cluster_1w", "cluster, 1 worker"),
        ("cluster_2w", "cluster, 2 workers"),
    ):
        m = r[where]
        rows.append(
            (
                label,
                f"{r[f'{where}_bootstrap_keys_per_s']:,}",
                f"{m['bootstrap_s']}",
                f"{m['bootstrap_wall_s']}",
                f"{r[f'{where}_reconcile_records_per_s']:,}",
                f"{m['reconcile_s']}",
                f"{m['reconcile_wall_s']}",
            )
        )
    width = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, width)))
        for row in rows
    ]
    return (
        f"spark_cluster: {r['keys']:,} keys, reconcile of {r['reconcile_records']:,} "
        f"records, {r['cores']} cores, median of {r['runs']}; 1 -> 2 workers: bootstrap "
        f"x{r['bootstrap_speedup_1w_to_2w']}, reconcile x{r['reconcile_speedup_1w_to_2w']}"
        "\n" + "\n".join("  " + ln for ln in lines)
    )


BENCH = Bench(
    "spark_cluster",
    run,
    (BOOT_2, BOOT_1, BOOT_L, REC_2, REC_1, REC_L),
    # one run per configuration in make bench: six Spark jobs of ~40-100 s each
    # (two runs each took 630 s, a fifth of make bench; the runs of 2026-11-28 were
    # within 15 % of each other but for one local reconcile)
    suite=lambda quick, runs: (
        {"keys": 20_000, "events": 50_000, "runs": 1} if quick else {"runs": 1}
    ),
    report=report,
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

"""The batch jobs on a real Spark cluster: a standalone master and two workers on 127.0.0.1
(separate JVMs, executors in their own processes), jobs sent with ``spark-submit --master
spark://...``. ``reconcile`` and ``backfill`` give the same answers as in-process ``local``;
the backfill publishes its corrections to the test broker from the cluster's driver.

The same commands on YARN or Kubernetes: docs/batch/cluster.md.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from app.batch.cli import main
from tests.harness import Names, create_topic, latest_by_id, read_all
from tests.oracle import Mood, exact_mood_joins, mood_answer
from tests.spark.standalone import StandaloneCluster
from tests.spark.test_commands import mood_archives, mood_inputs, read_lines  # noqa: F401
from tests.spark.test_commands import write_lines

ARGS = ["--no-progress"]


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path / "cluster", workers=2, cores_per_worker=1,
                          memory_per_worker="1g")
    try:
        yield c.start()
    finally:
        c.stop()
        rep = getattr(request.node, "rep_call", None)
        if rep is None or rep.failed:
            print(f"\n===== Spark standalone cluster logs =====\n{c.logs()}")


def submitted(cluster: StandaloneCluster, args: list[str]) -> Any:
    done = cluster.submit([*args, *ARGS])
    assert done.returncode in (0, 1), (
        f"spark-submit {args[0]} failed ({done.returncode})\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-6000:]}")
    return done


def test_reconcile_and_backfill_on_a_standalone_cluster_equal_local(
        spark, cluster, mood_archives, names: Names, tmp_path):
    inputs = ["--moods", mood_archives["moods"], "--events", mood_archives["events"]]
    log = [dict(r) for r in mood_archives["log"]]
    wrong_id = sorted(latest_by_id(log))[0]
    log.append(dict(latest_by_id(log)[wrong_id], mood="furious",
                    revision=latest_by_id(log)[wrong_id]["revision"] + 1))
    revisions = write_lines(tmp_path / "revisions.jsonl", log)
    late = write_lines(tmp_path / "late.jsonl", [{"name": "a", "mood": "zen", "event_time": 0}])

    # reconcile: one wrong join, the same report from the cluster and from local
    rc = ["reconcile", *inputs, "--revisions", revisions]
    on_cluster = submitted(cluster, [*rc, "--report", str(tmp_path / "cluster.jsonl")])
    assert on_cluster.returncode == 1 and "NOT CONVERGED" in on_cluster.stdout
    assert main([*rc, "--report", str(tmp_path / "local.jsonl"), *ARGS], spark=spark) == 1
    assert read_lines(tmp_path / "cluster.jsonl") == read_lines(tmp_path / "local.jsonl")
    assert read_lines(tmp_path / "cluster.jsonl")[0]["counts"]["wrong"] == 1

    # the jobs ran on the cluster's executors, not in a local driver
    apps = (cluster.state() or {}).get("completedapps", [])
    assert any(a["name"] == "etj-reconcile" for a in apps), apps
    assert cluster.executor_logs(), "no executor ever started on a worker"

    # backfill: published from the cluster to the broker; the same revisions as local
    asyncio.run(create_topic(names, names.output_topic, 2))
    bf = ["backfill", *inputs, "--revisions", revisions, "--late-moods", late]
    published = submitted(cluster, [*bf, "--broker", names.env["ETJ_BROKER_URL"], "--topic",
                                    names.output_topic, "--out", str(tmp_path / "c.jsonl")])
    assert published.returncode == 0
    assert main([*bf, "--dry-run", "--out", str(tmp_path / "l.jsonl"), *ARGS],
                spark=spark) == 0
    fixes = read_lines(tmp_path / "c.jsonl")
    assert fixes == read_lines(tmp_path / "l.jsonl") and fixes
    assert f"published {len(fixes)} revision(s)" in published.stdout

    sent = [v for _, v in asyncio.run(read_all(names, names.output_topic, idle_s=1.0))]
    assert sorted(sent, key=json.dumps) == sorted(fixes, key=json.dumps)
    moods, recs = mood_inputs()
    exact = exact_mood_joins([*moods, Mood("a", "zen", 0)], recs)
    ends_on = {i: mood_answer(r) for i, r in latest_by_id([*log, *sent]).items()}
    assert ends_on == exact  # a consumer of log + corrections ends on the exact answer


def test_bootstrap_on_a_standalone_cluster_writes_every_partition_from_the_executors(
        cluster, names: Names, tmp_path):
    """``bootstrap`` sent to the cluster: each partition's snapshot (built and uploaded by an
    executor) and changelog hold exactly the rows of the catalogue's keys Kafka's default
    partitioner puts there, as a worker writes them; the snapshot's offset is its last row."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import rocksdict

    from app.batch.state_files import OFFSET_KEY, history_rows
    from app.kafka.partitioner import partition_for
    from app.state.snapshot_store import Snapshots
    from tests.broker.test_snapshots import read_changelog

    partitions = 3
    records = [(f"film-{i}", 1_700_000_000_000 - i * 86_400_000, f"Title \"{i}\"")
               for i in range(600)] + [("film-7", 1_600_000_000_000, "Older cut")]
    catalogue = tmp_path / "movies.parquet"
    pq.write_table(pa.table({"movie_id": [r[0] for r in records],
                             "event_time": pa.array([r[1] for r in records], pa.int64()),
                             "title": [r[2] for r in records]}), catalogue)
    url = f"file://{tmp_path}/snapshots"
    env = {**names.env, "ETJ_STORE_URL": "rocksdb://", "ETJ_SNAPSHOT_URL": url,
           "ETJ_BUILTIN_JOINS": "movies", "ETJ_PARTITIONS": str(partitions)}
    done = cluster.submit(["bootstrap", "--join", "movies", "--dimension", str(catalogue),
                           "--wait-group-s", "5", *ARGS], env=env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert "600 keys of movies" in done.stdout, done.stdout  # film-7: two versions, one key
    apps = (cluster.state() or {}).get("completedapps", [])
    assert any(a["name"] == "etj-bootstrap" for a in apps), apps
    assert cluster.executor_logs(), "no executor ever started on a worker"

    topic = f"{names.env['ETJ_APP_ID']}-movies-dimension-changelog"
    log = asyncio.run(read_changelog(names, topic))
    snaps = Snapshots(url)
    for p in range(partitions):
        want = dict(history_rows([r for r in records if partition_for(r[0].encode(),
                                                                      partitions) == p],
                                 ["int", "str"]))
        assert want and {k: v for _, k, v in log[p]} == want
        (m,) = snaps.list(topic, p)
        assert m.offset == log[p][-1][0]
        snaps.download(m, tmp_path / f"p{p}")
        db = rocksdict.Rdict(str(tmp_path / f"p{p}"), rocksdict.Options(raw_mode=True),
                             access_type=rocksdict.AccessType.read_only())
        try:
            held = dict(db.items())
        finally:
            db.close()
        assert held.pop(OFFSET_KEY) == str(m.offset).encode()
        assert held == want
    assert snaps.bootstrap(topic).state == "done"

"""The batch jobs on a Spark cluster of machines of their own: a standalone master and two
workers, each a container of a node image with Java 17, Python 3.11 and Spark and nothing of
etj (:mod:`tests.spark.container_cluster`, :mod:`tests.spark.node_image`), on the real Docker
engine the image tier uses. The driver runs here (client mode) and sends what the executors
need with each job: the archive ``python -m app.batch pack-env`` writes (docs/batch/cluster.md).

- ``bootstrap``, sent as docs/batch/cluster.md shows it (the page's example, run as written: the
  archive travels with the job), writes from the executors the same changelog rows and
  snapshots as the in-process run, and a worker started after it is ready from those snapshots
  and joins exactly;
- ``exact``, ``reconcile`` and ``backfill`` of the built-in mood join and of a user's spec (with
  a float field: a Python UDF on the executors) give what the in-process run gives, on executors
  that have the project already (installed at the same path on every node: nothing sent); the
  backfill publishes from the driver to the broker;
- with nothing sent and nothing installed, an executor fails the job and the driver says why.

One cluster for the module (~10 s to start, the image built once per machine).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.batch.cli import main
from app.batch.pack import ALIAS, DEFAULT_OUT, pack, read_manifest
from app.batch.session import prepare_environment
from app.joins.resolve import resolve
from app.state.snapshot_store import Snapshots
from tests.broker.test_broker_movies import rating
from tests.broker.test_snapshots import read_changelog
from tests.docs.pages import DOCS, block
from tests.harness import Names, create_topic, latest_by_id, make_names, produce, read_all, wait_for
from tests.image.engine import Engine
from tests.oracle import (
    Mood,
    exact_answer,
    exact_mood_joins,
    exact_movie_answer,
    mood_answer,
    movie_answers,
)
from tests.spark import node_image
from tests.spark.container_cluster import ROOT, ContainerCluster
from tests.spark.test_bootstrap_broker import catalogue, write_parquet
from tests.spark.test_commands import mood_archives, mood_inputs, read_lines, write_lines  # noqa: F401
from tests.spark.test_spec_commands import CLICKS, LEVELS, NOW, click_archives, log_of
from tests.spark.test_spec_joins import click_spec

#: one xdist worker for this module and the image tier (tests/conftest.py's ONE_WORKER), one
#: after the other: they share the Docker engine, which each starts when none runs and stops
#: when it started it; and the module's cluster is made once. NB: pytest-xdist 3.8's loadgroup
#: marks a group by ``item._nodeid``, which pytest 9.2 no longer reads (``Node.nodeid`` is
#: ``_id``): until that is fixed, no group is kept on one worker, this one nor the image tier's
pytestmark = pytest.mark.xdist_group("image")

ARGS = ["--no-progress"]
PAGE = DOCS / "batch" / "cluster.md"
PARTITIONS = 4
#: the table the catalogue lands in: the movies join's ordered table, a version a ``V`` row
#: (app.joins.keys), as tests/spark/test_bootstrap_broker.py
TABLE = "movies-joins"


@pytest.fixture(scope="module")
def cluster(
    engine: Engine,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ContainerCluster]:
    """A master and two workers of one core each; the session's temporary folder (every test's
    ``tmp_path``) shared with them at the same path. Removed at the end, also on failure."""
    image = node_image.ensure(engine, tmp_path_factory.mktemp("node-image"))
    print(
        f"\nnode image {image.tag}{' (made now)' if image.made else ''}: {image.seconds:.1f} s",
        file=sys.stderr,
    )
    c = ContainerCluster(
        engine,
        image.tag,
        tmp_path_factory.getbasetemp(),
        tmp_path_factory.mktemp("cluster"),
        workers=2,
        cores_per_worker=1,
    )
    c.start()
    print(f"cluster {c.master_url} up in {c.started_s:.1f} s", file=sys.stderr)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def on_cluster(
    cluster: ContainerCluster,
    request: pytest.FixtureRequest,
) -> Iterator[ContainerCluster]:
    """The cluster; the logs of its nodes and executors printed when the test failed."""
    yield cluster
    rep = getattr(request.node, "rep_call", None)
    if rep is None or rep.failed:
        print(f"\n===== Spark cluster logs =====\n{cluster.logs()}")


@pytest.fixture(scope="module")
def executor_env() -> str:
    """``python -m app.batch pack-env``'s archive, where the command writes it by default (the
    page's example then finds it up to date)."""
    done = pack(ROOT / DEFAULT_OUT)
    manifest = read_manifest(done.path)
    assert manifest is not None and manifest["python"] == "3.11"
    names = {d.split("==")[0].lower() for d in manifest["distributions"]}  # type: ignore[union-attr]
    assert {"aiokafka", "rocksdict", "faust-streaming", "pyarrow"} <= names
    assert not names & {"pyspark", "py4j"}  # the cluster's Spark brings them
    print(
        f"\npack-env: {done.packed_bytes / 1e6:.1f} MB ({done.unpacked_bytes / 1e6:.1f} MB "
        f"unpacked) in {done.seconds:.1f} s",
        file=sys.stderr,
    )
    return str(done.path)


@pytest.fixture(scope="module")
def installed_on_nodes(executor_env: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The project and its executor-side dependencies installed at the same path on every node
    (the archive's ``site-packages/``, unpacked once on the shared folder): the executors' Python
    path, as an image with the project would have it."""
    folder = tmp_path_factory.mktemp("nodes-etj")
    with tarfile.open(executor_env) as tar:
        tar.extractall(
            folder, members=[m for m in tar if m.name.startswith("site-packages/")], filter="tar"
        )
    return str(folder / "site-packages")


def run_jobs(
    cluster: ContainerCluster, jobs: list[list[str]], tmp_path: Path, **kw: Any
) -> list[dict[str, Any]]:
    """The commands in one application (:mod:`tests.spark.cluster_jobs`); their results."""
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs))
    cmd = [
        *cluster.submit_args(kw.get("conf"), kw.get("archives", ())),
        str(ROOT / "tests" / "spark" / "cluster_jobs.py"),
        str(path),
    ]
    done = subprocess.run(
        cmd, env=cluster.driver_env(), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-8000:]}"
    return json.loads(Path(str(path) + ".out").read_text())  # type: ignore[no-any-return]


def by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in rows}


# --- where the driver's environment goes ------------------------------------------------------


def test_only_a_local_master_gets_this_interpreter_and_loopback(monkeypatch):
    """``SPARK_LOCAL_IP`` and ``PYSPARK_PYTHON`` for ``local[*]`` only: a cluster's executors
    are other machines, where this interpreter's path does not exist and a driver bound to
    loopback cannot be reached; what the user set is kept either way."""
    keys = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP")
    for k in keys:  # recorded as they are, restored at the end (delenv records a set one only)
        monkeypatch.setenv(k, "")
    for master in (
        "spark://spark-master:7077",
        "yarn",
        "k8s://https://api:443",
        "spark://127.0.0.1:7077",
    ):
        for k in keys:
            monkeypatch.delenv(k, raising=False)
        prepare_environment(master)
        assert not {k for k in keys if k in os.environ}, master
    prepare_environment(
        "spark://spark-master:7077", {"spark.pyspark.python": "./etj-env/bin/python"}
    )
    assert os.environ["PYSPARK_PYTHON"] == "./etj-env/bin/python"  # what spark-submit does
    for master in ("local", "local[2]", "local[*]", "local-cluster[2,1,1024]"):
        for k in keys:
            monkeypatch.delenv(k, raising=False)
        prepare_environment(master)
        assert [os.environ[k] for k in keys] == [sys.executable, sys.executable, "127.0.0.1"]
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    prepare_environment("local[*]")
    assert (os.environ["PYSPARK_PYTHON"], os.environ["SPARK_LOCAL_IP"]) == (
        "/opt/py/bin/python",
        "10.1.2.3",
    )


# --- exact, reconcile, backfill ---------------------------------------------------------------


def test_exact_reconcile_and_backfill_on_the_cluster_equal_the_in_process_run(
    spark, on_cluster, executor_env, installed_on_nodes, mood_archives, names: Names, tmp_path
):
    """The mood join and a user's spec, each command on the cluster and in this process: the
    same answers, reports and corrections; the backfill's corrections reach the broker from the
    driver, and a consumer of the log and the corrections ends on the exact answer. The six
    commands run on executors that share no file and no package with the driver (the project
    travels with the job: ``pack-env``'s archive); then the spec's exact answer, whose UDF
    runs on the executors, once more on executors that have the project installed and are
    sent nothing."""
    cluster = on_cluster
    # the mood join: one wrong answer in the log, a late mood
    moods = ["--moods", mood_archives["moods"], "--events", mood_archives["events"]]
    log = [dict(r) for r in mood_archives["log"]]
    wrong_id = sorted(latest_by_id(log))[0]
    log.append(
        dict(
            latest_by_id(log)[wrong_id],
            mood="furious",
            revision=latest_by_id(log)[wrong_id]["revision"] + 1,
        )
    )
    revisions = write_lines(tmp_path / "revisions.jsonl", log)
    late = write_lines(tmp_path / "late.jsonl", [{"name": "a", "mood": "zen", "event_time": 0}])
    asyncio.run(create_topic(names, names.output_topic, 2))

    # a user's spec from a joins file (clicks x levels: floats, booleans, optional strings;
    # the clicks without an id get one derived from a float: the Python UDF on the executors)
    raw = click_spec("at-or-before-else-earliest", "left")
    joins_file = str(tmp_path / "joins.json")
    Path(joins_file).write_text(json.dumps([raw]))
    spec = resolve(raw)
    events, levels = click_archives(tmp_path)
    expected = exact_answer(spec.rules, [(u, [t, lv, lb]) for u, t, lv, lb in LEVELS], CLICKS)
    clicks_log = log_of(spec, expected, {"events": ["user", "at", "score", "flag", "note"]})
    unanswered = CLICKS[1].id
    clicks = [
        "--join",
        "clicks",
        "--joins-file",
        joins_file,
        "--events",
        events,
        "--dimension",
        levels,
        "--now",
        str(NOW),
    ]
    clicks_revs = write_lines(
        tmp_path / "clicks-log.jsonl", [r for r in clicks_log if r["id"] != unanswered]
    )

    def jobs(side: str) -> list[list[str]]:
        out = lambda name: str(tmp_path / f"{side}-{name}")  # noqa: E731
        publish = (
            ["--broker", names.env["ETJ_BROKER_URL"], "--topic", names.output_topic]
            if side == "cluster"
            else ["--dry-run"]
        )
        return [
            ["exact", *moods, "--out", out("moods.jsonl"), *ARGS],
            [
                "reconcile",
                *moods,
                "--revisions",
                revisions,
                "--report",
                out("moods-report.jsonl"),
                *ARGS,
            ],
            [
                "backfill",
                *moods,
                "--revisions",
                revisions,
                "--late-moods",
                late,
                *publish,
                "--out",
                out("moods-fixes.jsonl"),
                *ARGS,
            ],
            ["exact", *clicks, "--out", out("clicks.parquet"), *ARGS],
            [
                "reconcile",
                *clicks,
                "--revisions",
                clicks_revs,
                "--report",
                out("clicks-report.jsonl"),
                *ARGS,
            ],
            [
                "backfill",
                *clicks,
                "--revisions",
                clicks_revs,
                "--dry-run",
                "--out",
                out("clicks-fixes.jsonl"),
                *ARGS,
            ],
        ]

    remote = run_jobs(
        cluster,
        jobs("cluster"),
        tmp_path,
        archives=[f"{executor_env}#{ALIAS}"],
        conf={"spark.pyspark.python": f"./{ALIAS}/bin/python"},
    )
    assert [r["code"] for r in remote] == [0, 1, 0, 0, 1, 0], remote
    installed = run_jobs(
        cluster,
        [["exact", *clicks, "--out", str(tmp_path / "installed-clicks.parquet"), *ARGS]],
        tmp_path,
        conf={"spark.executorEnv.PYTHONPATH": installed_on_nodes},
    )
    assert [r["code"] for r in installed] == [0], installed
    local = []
    for argv in jobs("local"):
        try:
            local.append(main(argv, spark=spark))
        except SystemExit as exc:
            local.append(exc.code)
    assert local == [0, 1, 0, 0, 1, 0]
    # the jobs ran on both workers' executors, not in the driver
    assert cluster.executor_hosts("etj-cluster-jobs") == {
        "etj-spark-worker-1",
        "etj-spark-worker-2",
    }

    def read(path: Path) -> list[dict[str, Any]]:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()  # type: ignore[no-any-return]
        return read_lines(path)

    for side, name in [
        *(
            ("cluster", n)
            for n in (
                "moods.jsonl",
                "moods-report.jsonl",
                "moods-fixes.jsonl",
                "clicks.parquet",
                "clicks-report.jsonl",
                "clicks-fixes.jsonl",
            )
        ),
        ("installed", "clicks.parquet"),
    ]:
        got, want = read(tmp_path / f"{side}-{name}"), read(tmp_path / f"local-{name}")
        if "report" in name:
            assert got == want, name
        else:
            assert by_id(got) == by_id(want) and len(got) == len(want), name
    assert by_id(read(tmp_path / "cluster-moods.jsonl")).keys() == mood_archives["expected"].keys()
    assert read_lines(tmp_path / "cluster-moods-report.jsonl")[0]["counts"]["wrong"] == 1
    assert read_lines(tmp_path / "cluster-clicks-report.jsonl")[0]["counts"]["missing"] == 1
    [fix] = read_lines(tmp_path / "cluster-clicks-fixes.jsonl")
    assert (fix["id"], fix["revision"], fix["cause"]) == (unanswered, 1, "backfill")
    assert (fix["level"], fix["label"]) == expected[unanswered][4]

    # the backfill published its corrections to the broker from the cluster's driver
    fixes = read_lines(tmp_path / "cluster-moods-fixes.jsonl")
    assert fixes and f"published {len(fixes)} revision(s)" in remote[2]["stdout"]
    sent = [v for _, v in asyncio.run(read_all(names, names.output_topic, idle_s=1.0))]
    assert sorted(sent, key=json.dumps) == sorted(fixes, key=json.dumps)
    moods_in, recs = mood_inputs()
    exact = exact_mood_joins([*moods_in, Mood("a", "zen", 0)], recs)
    assert {i: mood_answer(r) for i, r in latest_by_id([*log, *sent]).items()} == exact


# --- bootstrap --------------------------------------------------------------------------------


def bootstrap_env(names: Names, url: str) -> dict[str, str]:
    """The workers' settings, which the job is run with (docs/operating/bootstrap.md)."""
    return {
        **names.env,
        "ETJ_STORE_URL": "rocksdb://",
        "ETJ_SNAPSHOT_URL": url,
        "ETJ_BUILTIN_JOINS": "movies",
        "ETJ_PARTITIONS": str(PARTITIONS),
    }


def changelog_of(names: Names) -> str:
    return f"{names.env['ETJ_APP_ID']}-{TABLE}-changelog"


def snapshot_rows(url: str, topic: str, folder: Path) -> dict[int, tuple[int, dict[bytes, bytes]]]:
    """partition -> (the snapshot's offset, its database's rows)."""
    import rocksdict

    snaps, out = Snapshots(url), {}
    for p in range(PARTITIONS):
        (m,) = snaps.list(topic, p)
        snaps.download(m, folder / f"p{p}")
        db = rocksdict.Rdict(
            str(folder / f"p{p}"),
            rocksdict.Options(raw_mode=True),
            access_type=rocksdict.AccessType.read_only(),
        )
        try:
            out[p] = (m.offset, dict(db.items()))
        finally:
            db.close()
    return out


def test_bootstrap_as_the_page_shows_it_equals_the_in_process_run_and_a_worker_starts_from_it(
    on_cluster, executor_env, broker, names: Names, worker_factory, tmp_path
):
    """The page's ``spark-submit`` example, run as written: the executors write every
    partition's changelog rows and snapshot; the same catalogue bootstrapped in-process
    (``local[2]``) for another app gives the same rows at the same offsets and the same
    databases. A worker started afterwards installs the snapshots and joins exactly."""
    cluster = on_cluster
    cat = catalogue(300)
    lake = tmp_path / "lake"
    lake.mkdir()
    parquet = write_parquet(lake / "movies.parquet", cat)
    url = f"file://{tmp_path}/snapshots"
    for topic in (names.movies_topic, names.ratings_topic):
        asyncio.run(create_topic(names, topic, PARTITIONS))

    # 1. on the cluster: the page's block, as written; 2. meanwhile, in-process (local[2]) for
    # another app on the same broker
    script = block(PAGE, "bootstrap-on-a-cluster")
    env = cluster.driver_env(
        {
            **bootstrap_env(names, url),
            "SPARK_MASTER": cluster.master_url,
            "DRIVER_HOST": "127.0.0.1",
            "LAKE": str(lake),
            "SNAPSHOTS": url,
        }
    )
    local_names = make_names(broker.url)
    local_url = f"file://{tmp_path}/snapshots-local"
    logs = {
        side: [tmp_path / f"{side}-bootstrap.{s}.txt" for s in ("out", "err")]
        for side in ("cluster", "local")
    }
    procs = {
        "cluster": (["bash", "-euo", "pipefail", "-c", script], env),
        "local": (
            [
                sys.executable,
                "-m",
                "app.batch",
                "bootstrap",
                "--join",
                "movies",
                "--dimension",
                parquet,
                "--master",
                "local[2]",
                "--wait-group-s",
                "0",
                *ARGS,
            ],
            {**os.environ, **bootstrap_env(local_names, local_url)},
        ),
    }
    started = {}
    try:
        for side, (argv, side_env) in procs.items():
            with logs[side][0].open("w") as o, logs[side][1].open("w") as e:
                started[side] = subprocess.Popen(argv, env=side_env, cwd=ROOT, stdout=o, stderr=e)
        for proc in started.values():
            proc.wait(timeout=600)
    finally:
        for proc in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out, err, local_out, local_err = (
        f.read_text() for side in ("cluster", "local") for f in logs[side]
    )
    remote, local = started["cluster"], started["local"]
    assert remote.returncode == 0, f"{out[-3000:]}\n{err[-8000:]}"
    assert "pack-env: build/etj-executor-env.tar.gz up to date" in out, out
    assert f"300 keys of movies in {PARTITIONS} partition(s)" in out, out
    assert Snapshots(url).bootstrap(changelog_of(names)).state == "done"
    assert cluster.executor_hosts("etj-bootstrap") == {"etj-spark-worker-1", "etj-spark-worker-2"}
    assert local.returncode == 0, local_err[-5000:]
    assert f"300 keys of movies in {PARTITIONS} partition(s)" in local_out, local_out

    # the same rows at the same offsets, the same databases
    remote_log = asyncio.run(read_changelog(names, changelog_of(names)))
    local_log = asyncio.run(read_changelog(local_names, changelog_of(local_names)))
    assert remote_log == local_log and sorted(remote_log) == list(range(PARTITIONS))
    remote_snaps = snapshot_rows(url, changelog_of(names), tmp_path / "remote-db")
    assert remote_snaps == snapshot_rows(
        local_url, changelog_of(local_names), tmp_path / "local-db"
    )
    for p, (offset, rows) in remote_snaps.items():
        assert offset == remote_log[p][-1][0]
        assert {k: v for _, k, v in remote_log[p]} == {
            k: v for k, v in rows.items() if not k.startswith(b"__faust")
        }

    # 3. a worker started now installs the snapshots and joins exactly
    names.env.update(bootstrap_env(names, url))
    w = worker_factory(names, name="bootstrapped", snapshot_interval_s=3600)
    w.wait_ready(timeout_s=120)
    restored = set(
        re.findall(
            rf"restored {re.escape(changelog_of(names))}\[(\d+)\] from "
            "snapshot",
            w.log(),
        )
    )
    assert restored == {str(p) for p in range(PARTITIONS)}, w.log()[-3000:]
    ratings = [
        rating(f"r{i}", f"m{i * 7 % 300}", 1_790_000_000_000 + i * 1000, user=f"u{i % 5}")
        for i in range(60)
    ]
    asyncio.run(produce(names, names.ratings_topic, [(k, v) for _, k, v in ratings]))
    expected = exact_movie_answer(cat + ratings)

    async def converged() -> bool:
        got = movie_answers(
            [v for _, v in await read_all(names, names.rated_movies_topic, idle_s=1.0)]
        )
        return got == expected

    assert asyncio.run(wait_for(converged, timeout_s=90, every_s=2)), "not the exact answer"
    assert w.stop() == 0


def test_executors_without_etj_fail_the_job_and_the_driver_says_why(
    on_cluster, names: Names, tmp_path
):
    """Nothing sent, nodes without etj, no Python named: the executors start the node's
    ``python3`` (not the driver's interpreter path: :func:`prepare_environment`), whose first
    Python task fails on every attempt; the driver prints the executor's traceback and the job's
    ``bootstrap failed`` line, exit code 1, marker ``failed``: what docs/batch/cluster.md
    shows."""
    cluster = on_cluster
    parquet = write_parquet(tmp_path / "movies.parquet", catalogue(40, seed=5))
    url = f"file://{tmp_path}/snapshots"
    failed = cluster.submit(
        ["bootstrap", "--join", "movies", "--dimension", parquet, "--wait-group-s", "0", *ARGS],
        env=bootstrap_env(names, url),
    )
    said = f"{failed.stdout[-3000:]}\n{failed.stderr[-5000:]}"
    assert failed.returncode == 1, said
    # the executor's traceback, in the driver's log (stderr): its Python has not even pyarrow,
    # which the first Python task (the Arrow UDF placing the keys) needs
    assert "Lost task" in failed.stderr and "PythonException" in failed.stderr, said
    assert "ModuleNotFoundError: No module named 'pyarrow'" in failed.stderr, said
    assert "Cannot run program" not in failed.stderr, said  # the node's python3 started
    # the job's own last words (the Python driver's stderr: spark-submit prints it on stdout)
    assert (
        "bootstrap failed: ModuleNotFoundError: No module named 'pyarrow'\n"
        "If its marker was written, workers of the join wait"
    ) in failed.stdout, said
    assert Snapshots(url).bootstrap(changelog_of(names)).state == "failed"

"""``python -m app.batch bootstrap`` end to end on the real broker, live traffic on both topics:
a movie catalogue in Parquet becomes the movies join's starting state (changelog rows and
snapshots) while movies and ratings keep arriving; a worker started during the job waits for it,
then starts from the snapshots; every rating ends on the exact answer (tests/oracle.py over the
catalogue and everything sent). A second worker with no snapshot, replaying the changelog
alone, ends with the same table, row for row. The job refuses what it must: a second load, a
running worker, a topic of another partition count.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from app.state.snapshot_store import Snapshots
from tests.broker.test_broker_movies import movie, rating
from tests.broker.test_snapshots import dump_tables, read_changelog
from tests.harness import Names, create_topic, produce, read_all, wait_for
from tests.oracle import exact_movie_answer, movie_answers

DAY = 86_400_000
T = 1_790_000_000_000
PARTITIONS = 4
#: the table the catalogue lands in: the movies join's ordered table, a version a ``V`` row
#: (app.joins.keys)
TABLE = "movies-joins"


def catalogue(n: int, seed: int = 7) -> list[tuple[str, str, dict[str, Any]]]:
    """``n`` movies, a third with two versions (a remake's retitle), stamped long ago."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        t = T - rnd.randrange(30, 3000) * DAY
        out.append(movie(f"m{i}", f"Title {i}", t))
        if i % 3 == 0:
            out.append(movie(f"m{i}", f"Title {i} (restored)", t + rnd.randrange(1, 20) * DAY))
    return out


def live(n_movies: int, count: int, seed: int = 11) -> list[tuple[str, str, dict[str, Any]]]:
    """Ratings of catalogue movies, of movies only the live topic brings, and of a movie that
    never comes; live versions newer than the catalogue's and one older (must not win)."""
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        t = T + i * 60_000
        r = rnd.random()
        if r < 0.6:
            out.append(rating(f"r{i}", f"m{rnd.randrange(n_movies)}", t, user=f"u{i % 7}"))
        elif r < 0.75:
            out.append(rating(f"r{i}", f"new{rnd.randrange(20)}", t))
        elif r < 0.8:
            out.append(rating(f"r{i}", "m-never", t))
        elif r < 0.9:
            out.append(movie(f"m{rnd.randrange(n_movies)}", f"Retitled {i}", t - 5 * 60_000))
        elif r < 0.95:
            out.append(movie(f"new{rnd.randrange(20)}", f"New {i}", t - 3600_000))
        else:  # a version older than every catalogue one: joins nothing the catalogue answers
            out.append(movie(f"m{rnd.randrange(n_movies)}", f"Ancient {i}", T - 9000 * DAY))
    return out


def write_parquet(path: Path, records: list[tuple[str, str, dict[str, Any]]]) -> str:
    rows = [v for _, _, v in records]
    pq.write_table(
        pa.table(
            {
                "movie_id": [r["movie_id"] for r in rows],
                "title": [r["title"] for r in rows],
                "event_time": pa.array([r["event_time"] for r in rows], pa.int64()),
            }
        ),
        path,
    )
    return str(path)


def job_env(names: Names, url: str) -> dict[str, str]:
    return {
        **os.environ,
        **names.env,
        "ETJ_STORE_URL": "rocksdb://",
        "ETJ_SNAPSHOT_URL": url,
        "ETJ_BUILTIN_JOINS": "movies",
        "ETJ_PARTITIONS": str(PARTITIONS),
    }


def start_job(names: Names, url: str, parquet: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.batch",
            "bootstrap",
            "--join",
            "movies",
            "--dimension",
            parquet,
            "--no-progress",
            "--master",
            "local[2]",
            "--wait-group-s",
            "5",
        ],
        env={**job_env(names, url), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def send_paced(
    names: Names, records: list[tuple[str, str, dict[str, Any]]], seconds: float
) -> None:
    topic = {"movie": names.movies_topic, "rating": names.ratings_topic}
    for kind, key, value in records:
        await produce(names, topic[kind], [(key, value)])
        await asyncio.sleep(seconds / len(records))


def marker_state(url: str, names: Names) -> str | None:
    m = Snapshots(url).bootstrap(f"{names.env['ETJ_APP_ID']}-{TABLE}-changelog")
    return None if m is None else m.state


async def test_a_catalogue_bootstrapped_while_both_topics_are_live_joins_exactly(
    names, worker_factory, tmp_path
):
    url = f"file://{tmp_path}/snapshots"
    names.env.update(
        {
            "ETJ_STORE_URL": "rocksdb://",
            "ETJ_SNAPSHOT_URL": url,
            "ETJ_BUILTIN_JOINS": "movies",
            "ETJ_PARTITIONS": str(PARTITIONS),
            "ETJ_SNAPSHOT_INTERVAL_S": "3600",
        }
    )
    for topic in (names.movies_topic, names.ratings_topic):
        await create_topic(names, topic, PARTITIONS)
    cat = catalogue(3000)
    parquet = write_parquet(tmp_path / "catalogue.parquet", cat)
    traffic = live(3000, 400)

    # 1. live traffic on both topics from before the job to after it
    sending = asyncio.create_task(send_paced(names, traffic, seconds=25))
    job = start_job(names, url, parquet)
    # 2. a worker started while the job runs waits for it (its group join comes after the
    # job's check that the group is empty)
    assert await wait_for(
        lambda: _async(marker_state(url, names) == "running"), timeout_s=90, every_s=0.2
    ), "the job never marked the table"
    w = worker_factory(names, name="first")
    out, err = await asyncio.to_thread(job.communicate, timeout=300)
    assert job.returncode == 0, f"bootstrap failed\n{out}\n{err[-5000:]}"
    assert "3,000 keys of movies" in out, out
    assert marker_state(url, names) == "done"
    await sending
    w.wait_ready(timeout_s=120)
    log = w.log()
    assert "waiting until it is done before reading the table" in log, log[-3000:]
    restored = {int(p) for p in _restored(log, f"{names.env['ETJ_APP_ID']}-{TABLE}-changelog")}
    assert restored == set(range(PARTITIONS)), log[-3000:]

    # 3. every rating on its exact answer: the catalogue's versions and the live ones together
    expected = exact_movie_answer(cat + traffic)
    assert len(expected) > 200

    async def converged() -> dict[str, Any] | None:
        got = movie_answers(
            [v for _, v in await read_all(names, names.rated_movies_topic, idle_s=1.5)]
        )
        return got if got == expected else None

    got = await wait_for(converged, timeout_s=120, every_s=2)
    if not got:
        have = movie_answers([v for _, v in await read_all(names, names.rated_movies_topic)])
        wrong = [k for k in expected if have.get(k) != expected[k]][:5]
        raise AssertionError(
            f"{len(wrong)}+ ratings differ, e.g. {[(expected[k], have.get(k)) for k in wrong]}"
        )
    assert w.stop() == 0

    # 4. a worker without the snapshots (a standby, a deleted snapshot) replays the changelog
    # alone and ends with the same table, row for row
    second = worker_factory(names, name="second", snapshot_url="")
    second.wait_ready(timeout_s=120)
    assert "restored " not in second.log()
    assert second.stop() == 0
    first_rows = _dimension(tmp_path / "first-data")
    second_rows = _dimension(tmp_path / "second-data")
    assert sum(len(r) for r in first_rows.values()) >= 3000
    assert first_rows == second_rows
    log_rows = await read_changelog(names, f"{names.env['ETJ_APP_ID']}-{TABLE}-changelog")
    assert sum(len(v) for v in log_rows.values()) >= 3000

    # 5. a second load is refused: the table's state lives in its changelog now
    again = start_job(names, url, parquet)
    out, err = await asyncio.to_thread(again.communicate, timeout=300)
    assert again.returncode == 1 and "was bootstrapped by job" in err, (out, err[-3000:])


def _async(value: Any) -> Any:
    async def done() -> Any:
        return value

    return done()


def _restored(log: str, topic: str) -> list[str]:
    import re

    return re.findall(rf"restored {re.escape(topic)}\[(\d+)\] from snapshot", log)


def _dimension(datadir: Path) -> dict[int, dict[bytes, bytes]]:
    """partition -> the version rows (``V``) of the movies join's table on disk."""
    return {
        p: {k: v for k, v in rows.items() if k[:1] == b"V"}
        for (table, p), rows in dump_tables(datadir).items()
        if table == TABLE
    }


async def test_a_job_that_fails_half_way_keeps_workers_waiting_until_a_rerun_finishes(
    names, worker_factory, tmp_path
):
    """A running worker makes the job refuse; a version too big for a produce request fails the
    job half way (some partitions written, one not): a worker started then waits, not ready; the
    job run again on the same path, the catalogue fixed, finishes; the worker starts from the
    snapshots, its table equals a changelog-only replay row for row (the rows the failed
    attempt wrote included), and the ratings join exactly."""
    url = f"file://{tmp_path}/snapshots"
    names.env.update(
        {
            "ETJ_STORE_URL": "rocksdb://",
            "ETJ_SNAPSHOT_URL": url,
            "ETJ_BUILTIN_JOINS": "movies",
            "ETJ_PARTITIONS": str(PARTITIONS),
            "ETJ_SNAPSHOT_INTERVAL_S": "3600",
            "ETJ_SESSION_TIMEOUT_S": "4",
        }
    )
    for topic in (names.movies_topic, names.ratings_topic):
        await create_topic(names, topic, PARTITIONS)
    cat = catalogue(400, seed=3)
    big = [movie("m-big", f"Cut {i} " + "x" * 150, T - (500 - i) * DAY) for i in range(200)]
    gone = [movie("m-gone", "Only in the first attempt", T - 90 * DAY)]
    parquet = write_parquet(tmp_path / "catalogue.parquet", cat + big + gone)
    small = {"ETJ_PRODUCER_MAX_REQUEST_BYTES": "150"}  # a version of m-big does not fit

    # 1. a worker of the join is running: refused, nothing written
    running = worker_factory(names, name="early").wait_ready()
    refused = start_job(names, url, parquet)
    out, err = await asyncio.to_thread(refused.communicate, timeout=300)
    assert refused.returncode == 1 and "member(s): stop the join's workers first" in err, err
    assert marker_state(url, names) is None
    assert running.stop() == 0
    shutil.rmtree(tmp_path / "early-data")

    # 2. the job fails half way on m-big's partition
    job = start_job(names, url, parquet, **small)
    out, err = await asyncio.to_thread(job.communicate, timeout=300)
    assert job.returncode == 1 and "bootstrap failed" in err and "m-big" in err, err[-3000:]
    assert marker_state(url, names) == "failed"

    # 3. a worker started now waits, not ready, and says why
    w = worker_factory(names, name="first")

    async def says_failed() -> bool:
        return "bootstrap job" in w.log() and "failed" in w.log()

    assert await wait_for(says_failed, timeout_s=60), w.log()[-3000:]
    assert w.get("/ready/")[0] == 503

    # 4. run again on the same path (m-big cut to 3 versions of short titles, m-gone out): done,
    # the worker goes
    big = [movie("m-big", f"Cut {i}", T - (500 - i) * DAY) for i in range(3)]
    parquet = write_parquet(tmp_path / "catalogue.parquet", cat + big)
    again = start_job(names, url, parquet)
    out, err = await asyncio.to_thread(again.communicate, timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert marker_state(url, names) == "done"
    w.wait_ready(timeout_s=120)
    ratings = [
        rating(f"r{i}", f"m{i % 400}" if i % 5 else "m-big", T + i * 1000) for i in range(120)
    ]
    for _kind, key, value in ratings:
        await produce(names, names.ratings_topic, [(key, value)])
    expected = exact_movie_answer(cat + big + ratings)

    async def converged() -> dict[str, Any] | None:
        got = movie_answers(
            [v for _, v in await read_all(names, names.rated_movies_topic, idle_s=1.5)]
        )
        return got if got == expected else None

    assert await wait_for(converged, timeout_s=120, every_s=2), "ratings not on the exact answer"
    assert w.stop() == 0

    # 5. the changelog alone gives the same table (the failed attempt's rows included)
    second = worker_factory(names, name="second", snapshot_url="")
    second.wait_ready(timeout_s=120)
    assert second.stop() == 0
    first_rows = _dimension(tmp_path / "first-data")
    assert first_rows == _dimension(tmp_path / "second-data")
    assert any(b"m-big" in k for rows in first_rows.values() for k in rows)

"""The PostgreSQL sink against a real PostgreSQL server and a real broker (issue 48, item 5).

1. The rule in the database: revision 2 then revision 1 redelivered keeps 2; a record that is
   not a revision is a row of ``<table>_rejected`` with its reason; a tombstone deletes.
2. End to end: a join's revision log (with the repeats a crash makes: older revisions again
   after newer ones) is produced while ``faust -A app.main sink postgres`` lands it; the sink
   is killed with -9 mid-stream, restarted, and a second sink of the group joins (a
   rebalance). The table ends equal to the oracle: the highest revision per join id.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiokafka import AIOKafkaProducer

from app.downstream.postgres_sink import PostgresSink, plan_batch, table_name_for
from tests.harness import Names, bootstrap, create_topic, wait_for
from tests.postgres_server import PostgresServer

PARTITIONS = 4


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.stop()


def rows(dsn: str, table: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """id -> (revision, record) of the sink's table (empty while it does not exist)."""
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]
        if exists is None:
            return {}
        return {
            r[0]: (r[1], r[2]) for r in conn.execute(f'SELECT id, revision, record FROM "{table}"')
        }


def rejected(dsn: str, table: str) -> list[tuple[int, int, str]]:
    with psycopg.connect(dsn) as conn:
        return list(
            conn.execute(
                f"SELECT kafka_partition, kafka_offset, reason FROM "
                f'"{table}_rejected" ORDER BY 1, 2'
            )
        )


def revision(jid: str, n: int) -> dict[str, Any]:
    return {
        "id": jid,
        "consultant": "c",
        "revision": n,
        "mood": f"mood-{n}",
        "previous_mood": None if n == 1 else f"mood-{n - 1}",
        "cause": "arrival",
    }


def test_a_redelivered_older_revision_never_overwrites_a_newer_one(pg):
    table = "etj_rule_check"
    sink = PostgresSink("unused:9092", "unused", pg.dsn, table, "unused")

    async def scenario() -> None:
        conn = await sink._connect()
        try:
            enc = lambda r: json.dumps(r).encode()  # noqa: E731
            # 1. revision 2 of r1 (its revision 1 was in an earlier batch), revision 1 of r2
            await sink.write(
                conn,
                plan_batch(
                    [
                        (0, 0, b"r1", enc(revision("r1", 1))),
                        (0, 1, b"r1", enc(revision("r1", 2))),
                        (1, 0, b"r2", enc(revision("r2", 1))),
                    ]
                ),
            )
            # 2. a redelivery: revision 1 of r1 again (after a crash), and two bad records
            moved = await sink.write(
                conn,
                plan_batch(
                    [
                        (0, 0, b"r1", enc(revision("r1", 1))),
                        (0, 2, b"x", b"{not json"),
                        (0, 3, b"x", b'{"id": "r9"}'),
                    ]
                ),
            )
            assert moved == 0
            # 3. the same batch once more (offsets were not committed): nothing new
            await sink.write(conn, plan_batch([(0, 2, b"x", b"{not json")]))
            # 4. a tombstone of r2
            await sink.write(conn, plan_batch([(1, 1, b"r2", None)]))
        finally:
            await conn.close()

    asyncio.run(scenario())
    got = rows(pg.dsn, table)
    assert {k: v[0] for k, v in got.items()} == {"r1": 2}
    assert got["r1"][1]["mood"] == "mood-2"
    reasons = rejected(pg.dsn, table)
    assert [(p, o) for p, o, _ in reasons] == [(0, 2), (0, 3)]  # each once, with its reason
    assert reasons[0][2].startswith("not JSON") and "revision" in reasons[1][2]


def revision_log(
    seed: int, ids: int, start: int = 0
) -> tuple[list[tuple[str, Any]], dict[str, int]]:
    """(key, value) records of a revision log in log order, with a crash's repeats (an older
    revision again after a newer one), and the oracle: the highest revision per id."""
    rng = random.Random(seed)
    log: list[tuple[str, Any]] = []
    best: dict[str, int] = {}
    for i in range(start, start + ids):
        jid = f"j{i}"
        top = rng.randint(1, 4)
        for n in range(1, top + 1):
            log.append((jid, revision(jid, n)))
        if rng.random() < 0.3:  # re-emitted after a crash: an older number after the newest
            log.append((jid, revision(jid, rng.randint(1, top))))
        best[jid] = top
    return log, best


async def produce_fast(
    names: Names,
    topic: str,
    records: list[tuple[str, Any]],
    pace_every: int = 0,
    pace_s: float = 0.0,
) -> None:
    """Send in order (per key, in order: one partition each), batched by the producer."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap(names), linger_ms=20, **names.client_auth()
    )
    await producer.start()
    try:
        for i, (key, value) in enumerate(records):
            raw = value if isinstance(value, bytes) else json.dumps(value).encode()
            await producer.send(topic, raw, key=key.encode())
            if pace_every and i % pace_every == pace_every - 1:
                await producer.flush()
                await asyncio.sleep(pace_s)
        await producer.flush()
    finally:
        await producer.stop()


class Sink:
    """A ``faust -A app.main sink postgres`` child process."""

    def __init__(self, names: Names, dsn: str, workdir: Path, name: str) -> None:
        self.log_path = workdir / f"sink-{name}.log"
        env = {**os.environ, **names.env}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "faust",
                    "-A",
                    "app.main",
                    "sink",
                    "postgres",
                    "--join",
                    "moods",
                    "--dsn",
                    dsn,
                    "--max-records",
                    "25",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9


def test_the_table_equals_the_oracle_after_a_kill_and_a_rebalance(names, pg, tmp_path):
    topic, table = names.output_topic, table_name_for("moods")
    first, best1 = revision_log(1, 200)
    second, best2 = revision_log(2, 400, start=100)  # newer revisions of half of the ids too
    oracle = dict(best1)
    for jid, n in best2.items():
        oracle[jid] = max(oracle.get(jid, 0), n)
    bad = [("bad", b"{not json")]
    sinks: list[Sink] = []

    async def scenario() -> int:
        await create_topic(names, topic, PARTITIONS)
        await produce_fast(names, topic, first + bad)
        # 1. a sink lands the first part, and the second as it is produced (~15 s of it)
        a = Sink(names, pg.dsn, tmp_path, "a")
        sinks.append(a)
        assert await wait_for(lambda: _landed(pg.dsn, table), timeout_s=120, every_s=0.3), a.log()[
            -3000:
        ]
        producing = asyncio.ensure_future(
            produce_fast(names, topic, second, pace_every=25, pace_s=0.4)
        )
        await asyncio.sleep(2.0)
        # 2. kill -9 mid-stream; restarted; a second member joins while records still come
        a.kill()
        landed = len(rows(pg.dsn, table))
        sinks.append(Sink(names, pg.dsn, tmp_path, "b"))
        await asyncio.sleep(2.0)
        sinks.append(Sink(names, pg.dsn, tmp_path, "c"))
        await producing
        return landed

    try:
        landed_at_kill = asyncio.run(scenario())
        assert 0 < landed_at_kill < len(oracle)  # mid-stream: not all of it was in
        b, c = sinks[1], sinks[2]

        async def exact() -> bool:
            return {k: v[0] for k, v in rows(pg.dsn, table).items()} == oracle

        assert asyncio.run(wait_for(exact, timeout_s=180, every_s=1.0)), (
            f"table != oracle\n{b.log()[-3000:]}\n{c.log()[-3000:]}"
        )
        got = rows(pg.dsn, table)
        assert all(rec["mood"] == f"mood-{n}" for n, rec in got.values())
        assert [reason.split(":")[0] for _, _, reason in rejected(pg.dsn, table)] == [
            "not JSON"
        ]  # once, however often its batch was redelivered
        assert b.stop() == 0 and c.stop() == 0
        # the second member took partitions over from the first and wrote some of them
        done = re.search(r"sink stopped: SinkCounts\(batches=(\d+), records=(\d+)", c.log())
        assert done is not None and int(done[2]) > 0, c.log()[-3000:]
    finally:
        for s in sinks:
            s.kill()


async def _landed(dsn: str, table: str) -> bool:
    return len(rows(dsn, table)) > 0

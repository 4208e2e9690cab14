"""Snapshots of table partitions, on the real broker: a worker with an empty disk starts from the
newest snapshot and replays only the changelog after it; the result equals a full replay key for
key, and the joins after it are exact. A corrupt snapshot and one older than the changelog's
retention are refused: the worker replays the whole (available) changelog instead, and says so.

"A full replay", key for key: every table partition's RocksDB database (read after the worker
stopped) against the last value per key of its changelog partition read from the broker — what
Faust's recovery of an empty disk computes, by definition.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from app.commands.sample_traffic import sample_moods_and_events
from app.joins.keys import EXPIRY, ID, JOIN, VERSION, expiry_key, id_key, split_join_key
from app.state.snapshot_store import Snapshots
from tests.faults import send, settle_and_check
from tests.harness import Names, S3Broker, bootstrap, wait_for

START = 1_790_000_000_000
OFFSET_KEY = b"__faust\0offset__"  # faust.stores.rocksdb.Store.offset_key
#: the table the snapshots are watched on: the mood join's ordered table, where a mood is a
#: ``V`` row (app.joins.keys) next to the joins
HISTORY = "recent-joins"
PARTITIONS = 4

# a sitecustomize for the stale-snapshot test: the worker's consumer reports a log-start offset
# (beginning_offsets) above the real one for the partitions ETJ_TEST_LOG_START names, as a
# broker whose changelog lost old segments to retention does (tansu cannot delete records)
FAKE_LOG_START = """
import json, os
spec = json.loads(os.environ.get("ETJ_TEST_LOG_START") or "{}")
if spec:
    from aiokafka import AIOKafkaConsumer
    _real = AIOKafkaConsumer.beginning_offsets
    async def beginning_offsets(self, partitions):
        got = await _real(self, partitions)
        return {tp: max(off, spec.get(tp.topic, {}).get(str(tp.partition), off))
                for tp, off in got.items()}
    AIOKafkaConsumer.beginning_offsets = beginning_offsets
"""


def changelog(names: Names, table: str) -> str:
    return f"{names.env['ETJ_APP_ID']}-{table}-changelog"


async def read_changelog(
    names: Names,
    topic: str,
) -> dict[int, list[tuple[int, bytes, bytes | None]]]:
    """partition -> [(offset, key, value)] of ``topic``, read to its end offsets."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(names), **names.client_auth(), enable_auto_commit=False
    )
    await consumer.start()
    out: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if topic not in await consumer.topics() or not parts:
            return out
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning()
        ends = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if ends[tp] > 0}
        while todo:
            for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                for m in msgs:
                    out.setdefault(tp.partition, []).append((m.offset, m.key, m.value))
                    if m.offset + 1 >= ends[tp]:
                        todo.discard(tp)
        return out
    finally:
        await consumer.stop()


def replay(
    records: list[tuple[int, bytes, bytes | None]],
    from_offset: int = 0,
) -> dict[bytes, bytes]:
    """What Faust's recovery builds from a changelog partition: the last value per key."""
    state: dict[bytes, bytes] = {}
    for offset, key, value in records:
        if offset < from_offset:
            continue
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def dump_tables(datadir: Path) -> dict[tuple[str, int], dict[bytes, bytes]]:
    """(table, partition) -> its RocksDB rows (Faust's offset row left out); worker stopped."""
    out = {}
    for path in datadir.rglob("*.db"):
        m = re.fullmatch(r"(.+)-(\d+)\.db", path.name)
        if not m or not path.is_dir() or ".etj-snapshots" in path.parts:
            continue
        db = rocksdict.Rdict(
            str(path),
            rocksdict.Options(raw_mode=True),
            access_type=rocksdict.AccessType.read_only(),
        )
        try:
            out[(m.group(1), int(m.group(2)))] = {k: v for k, v in db.items() if k != OFFSET_KEY}
        finally:
            db.close()
    return out


async def assert_equals_full_replay(names: Names, datadir: Path) -> int:
    """Every table partition on disk equals the replay of its changelog; the rows compared."""
    tables = dump_tables(datadir)
    assert (HISTORY, 0) in tables, sorted(tables)
    compared = 0
    for table in sorted({t for t, _ in tables}):
        log = await read_changelog(names, changelog(names, table))
        for p in range(PARTITIONS):
            got = tables.get((table, p), {})
            joins_table = any(k[:1] in (JOIN, ID, EXPIRY, VERSION) for k in got)
            got, index = split_index_rows(got)
            want = replay(log.get(p, []))
            assert got == want, (
                f"{table}[{p}]: {len(got)} rows, full replay {len(want)}; "
                f"differ on {sorted(set(got) ^ set(want))[:5]} / "
                f"{[k for k in got if k in want and got[k] != want[k]][:5]}"
            )
            if joins_table:
                check_index_rows(table, p, got, index)
            compared += len(want)
    return compared


def split_index_rows(rows: dict[bytes, bytes]) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
    """A joins table's rows: (its changelog's rows, the index rows the worker derives from
    them: app.joins.keys); (every row, {}) for another table."""
    if not any(k[:1] in (JOIN, ID, EXPIRY, VERSION) for k in rows):
        return rows, {}
    return (
        {k: v for k, v in rows.items() if k[:1] in (JOIN, VERSION)},
        {k: v for k, v in rows.items() if k[:1] not in (JOIN, VERSION)},
    )


def check_index_rows(
    table: str, p: int, joins: dict[bytes, bytes], index: dict[bytes, bytes]
) -> None:
    """Each join row has its id row and its expiry bucket's row, and each id row points at a
    join row (an expiry row may outlive its joins until its bucket is behind the horizon)."""
    ids = {k: v for k, v in index.items() if k[:1] == ID}
    buckets = {k for k in index if k[:1] == EXPIRY}
    want_ids = {}
    for k in joins:
        if k[:1] != JOIN:
            continue  # a version: no index rows
        key, t, jid = split_join_key(k)
        want_ids[id_key(key, jid)] = str(t).encode()
        assert expiry_key(p, t, key) in buckets, (table, p, k)
    assert ids == want_ids, (
        f"{table}[{p}]: id rows differ on {sorted(set(ids) ^ set(want_ids))[:5]}"
    )


def snapshots_env(names: Names, url: str, interval_s: float = 1.0, **extra: str) -> None:
    names.env.update(
        {
            "ETJ_STORE_URL": "rocksdb://",
            "ETJ_SNAPSHOT_URL": url,
            "ETJ_SNAPSHOT_INTERVAL_S": str(interval_s),
            **extra,
        }
    )


async def newest_offsets(snaps: Snapshots, topic: str) -> dict[int, int]:
    listed = await asyncio.to_thread(snaps.list, topic)
    return {m.partition: m.offset for m in listed}


async def wait_snapshots(
    names: Names, snaps: Snapshots, at_least: dict[int, int] | None = None, timeout_s: float = 60
) -> dict[int, int]:
    """Wait until every history partition has a snapshot (at or past ``at_least``'s offsets)."""
    topic = changelog(names, HISTORY)

    async def ready() -> dict[int, int] | None:
        got = await newest_offsets(snaps, topic)
        if len(got) == PARTITIONS and all(got[p] >= o for p, o in (at_least or {}).items()):
            return got
        return None

    got = await wait_for(ready, timeout_s=timeout_s, every_s=0.5)
    assert got, f"no snapshot of every partition of {topic}: {await newest_offsets(snaps, topic)}"
    return got


async def wait_caught_up(
    names: Names,
    snaps: Snapshots,
    timeout_s: float = 60,
) -> dict[int, int]:
    """Wait until each history partition's newest snapshot covers its whole changelog."""
    topic = changelog(names, HISTORY)

    async def caught_up() -> dict[int, int] | None:
        log = await read_changelog(names, topic)
        got = await newest_offsets(snaps, topic)
        ends = {p: v[-1][0] for p, v in log.items()}
        return got if len(ends) == PARTITIONS and got == ends else None

    got = await wait_for(caught_up, timeout_s=timeout_s, every_s=1.0)
    assert got, "the snapshots never caught up with the history changelog"
    return got


def moods(who: list[str], t0: int, n: int) -> list[tuple[str, Any, Any]]:
    return [
        (
            "mood",
            c,
            {"name": c, "mood": ["happy", "sad", "tired"][i % 3], "event_time": t0 + i * 1000},
        )
        for i in range(n)
        for c in who
    ]


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A moto S3 server (as the broker-restart test runs it) with its bucket; AWS_* set here
    and passed to the workers."""
    store = S3Broker(tmp_path)
    store.start_storage()
    env = {
        "AWS_ACCESS_KEY_ID": "etj",
        "AWS_SECRET_ACCESS_KEY": "etj",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{store.s3_port}",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        yield env
    finally:
        store.stop()


async def test_kill_9_then_an_empty_disk_starts_from_the_snapshot_and_equals_a_full_replay(
    names, worker_factory, tmp_path, s3
):
    url = "s3://tansu/snapshots"
    # a short session: the new worker's group join waits for the killed member to time out
    snapshots_env(names, url, interval_s=2, ETJ_SESSION_TIMEOUT_S="4", **s3)
    snaps = Snapshots(url)
    records = sample_moods_and_events(
        seed=5,
        count=260,
        start_ms=START,
        late_ratio=0.3,
        consultants=tuple(f"c{i}" for i in range(16)),
    )
    first = worker_factory(names, name="first").wait_ready()

    # 1. a dimension and joins; every partition gets its first snapshot
    sent = await send(names, records[:110], pace_s=0.005)
    await wait_snapshots(names, snaps)
    # 2. the worker keeps writing, and is killed -9 mid-stream
    sending = asyncio.create_task(send(names, records[110:190], pace_s=0.01))
    await asyncio.sleep(0.8)
    assert first.kill() == -9
    sent += await sending
    shutil.rmtree(tmp_path / "first-data", ignore_errors=True)  # a new pod, an empty disk

    # 3. a new worker: from the snapshots, then the changelog after them
    second = worker_factory(names, name="second").wait_ready(timeout_s=90)
    restored = re.findall(r"restored (\S+)\[(\d+)\] from snapshot \S+ \(offset (\d+)", second.log())
    history = {int(p): int(o) for t, p, o in restored if t == changelog(names, HISTORY)}
    assert sorted(history) == list(range(PARTITIONS)), second.log()[-3000:]
    assert second.get("/ready/")[0] == 200
    ends = {
        p: len(v) and v[-1][0]
        for p, v in (await read_changelog(names, changelog(names, HISTORY))).items()
    }
    assert any(ends.get(p, -1) > o for p, o in history.items()), (
        "the kill must leave changelog records after the snapshots (a tail to replay)",
        history,
        ends,
    )

    # 4. the joins after it are exact (the oracle, tests/oracle.py), then the tables equal a
    # full replay of their changelogs, key for key
    sent += await send(names, records[190:], pace_s=0.005)
    await settle_and_check(names, records, sent, [second])
    assert second.stop() == 0
    assert await assert_equals_full_replay(names, tmp_path / "second-data") > 0


async def test_corrupt_and_stale_snapshots_are_refused_and_the_changelog_is_replayed(
    names, worker_factory, tmp_path
):
    """History partitions 0 and 1: every snapshot truncated -> "unreadable", full replay.
    Partitions 2 and 3: the snapshots are older than the changelog's retention -> refused, the
    changelog replayed from its log start. tansu cannot delete records (it closes the
    connection on DeleteRecords), so that truncated changelog is simulated: the last worker's
    consumer reports, for partitions 2 and 3 of the history changelog, a log-start offset two
    past the snapshot's offset (a sitecustomize patches aiokafka's ``beginning_offsets`` in
    that process only, FAKE_LOG_START). Faust's own recovery sees the same log start, so a
    full replay there means: from it."""
    url = f"file://{tmp_path / 'snaps'}"
    snapshots_env(names, url)
    snaps = Snapshots(url)
    topic = changelog(names, HISTORY)
    old = [f"old{i}" for i in range(24)]
    new = [f"new{i}" for i in range(24)]
    corrupt, stale = (0, 1), (2, 3)

    # 1. snapshots of the old consultants' moods, caught up with the changelog; then the new
    # ones' moods reach the changelog through a worker that takes no snapshots
    first = worker_factory(names, name="first").wait_ready()
    await send(names, moods(old, START, 2))
    taken = await wait_caught_up(names, snaps)
    assert first.stop() == 0
    assert await newest_offsets(snaps, topic) == taken
    names.env.pop("ETJ_SNAPSHOT_URL")
    again = worker_factory(names, name="first")  # same datadir
    listing_done = asyncio.create_task(
        asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "faust",
                "-A",
                "app.main",
                "snapshots",
                "--url",
                url,
                "--table",
                topic,
            ],
            env={**os.environ, **names.env},
            capture_output=True,
            text=True,
            timeout=120,
        )
    )
    await asyncio.to_thread(again.wait_ready)
    await send(names, moods(new, START + 10_000, 2))
    grew = await wait_for(lambda: _history_grew(names, taken), timeout_s=60, every_s=0.5)
    assert grew, "the new moods never reached every history changelog partition"
    assert again.stop() == 0

    # the operator's view of the store (`faust -A app.main snapshots`, run meanwhile)
    listing = await listing_done
    rows = [line.split() for line in listing.stdout.splitlines() if line.startswith(topic)]
    listed = await asyncio.to_thread(snaps.list, topic)
    assert sorted((int(r[1]), int(r[2]), r[-1]) for r in rows) == sorted(
        (m.partition, m.offset, m.id) for m in listed
    ), listing.stdout + listing.stderr

    # 2. partitions 0, 1: every snapshot truncated; 2, 3: the changelog "lost" everything up
    # to each snapshot's offset + 1
    for m in listed:
        if m.partition in corrupt:
            root = tmp_path / "snaps" / m.prefix
            victim = max(
                (f for f in root.iterdir() if f.name != "manifest.json"),
                key=lambda f: f.stat().st_size,
            )
            victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    log_start = {p: taken[p] + 2 for p in stale}
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAKE_LOG_START)
    names.env.update(
        {
            "ETJ_SNAPSHOT_URL": url,
            "PYTHONPATH": f"{site}{os.pathsep}" + os.environ.get("PYTHONPATH", ""),
            "ETJ_TEST_LOG_START": json.dumps({topic: {str(p): o for p, o in log_start.items()}}),
        }
    )

    # 3. a worker with an empty disk: it refuses them all, says why, and replays
    third = worker_factory(names, name="third").wait_ready(timeout_s=90)
    text = third.log()
    for p in corrupt:
        assert re.search(
            rf"snapshot \S+ of {re.escape(topic)}\[{p}\] not used: unreadable", text
        ), text[-3000:]
        assert f"no usable snapshot of {topic}[{p}]: full replay" in text
    for p in stale:
        assert re.search(
            rf"snapshot \S+ of {re.escape(topic)}\[{p}\] not used: older than "
            r"the changelog's retention",
            text,
        ), text[-3000:]
    assert "restored " + topic not in text
    assert third.stop() == 0
    tables = dump_tables(tmp_path / "third-data")
    records = await read_changelog(names, topic)
    for p in corrupt:  # the whole changelog: old and new consultants
        assert tables.get((HISTORY, p), {}) == replay(records.get(p, [])), p
    for p in stale:  # from the log start: the records before it are "gone"
        got = tables.get((HISTORY, p), {})
        assert got == replay(records.get(p, []), from_offset=log_start[p]), p
        assert got and all(row_key(k).startswith("new") for k in got), (
            "new consultants only: the stale snapshot's old ones must not be there",
            p,
        )
    history = [row_key(k) for p in corrupt for k in tables.get((HISTORY, p), {})]
    assert any(k.startswith("old") for k in history) and any(k.startswith("new") for k in history)


def row_key(raw: bytes) -> str:
    """The join key (consultant) of a ``V`` or ``J`` row (app.joins.keys)."""
    return raw[5 : 5 + int.from_bytes(raw[1:5], "big")].decode()


async def _history_grew(names: Names, past: dict[int, int]) -> bool:
    log = await read_changelog(names, changelog(names, HISTORY))
    return all(log.get(p) and log[p][-1][0] >= o + 2 for p, o in past.items())

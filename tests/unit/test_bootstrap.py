"""The bootstrap job's parts that need no Spark nor broker: the rows it writes are what a worker's
table holds (byte for byte: orjson, Faust's json codec), the database it builds opens as Faust
opens a partition and holds Faust's offset row, the marker in the store, and the worker's wait
for a bootstrap that is not done. End to end: tests/spark/test_bootstrap_broker.py.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import orjson
import pytest
import rocksdict
from faust.stores.rocksdb import Store
from hypothesis import given, settings
from hypothesis import strategies as st

from app.batch.state_files import (
    OFFSET_KEY,
    _database,
    arrow_rows,
    arrow_version_rows,
    history_rows,
    version_rows,
)
from app.logic.histories import insert_version
from app.state import snapshot_service
from app.state.snapshot_service import SnapshotService
from app.state.snapshot_store import (
    BootstrapMarker,
    FileStore,
    MissingObject,
    SnapshotError,
    Snapshots,
    read_offset,
)

keys = st.text(min_size=1, max_size=12)
texts = st.text(max_size=12)  # quotes, backslashes, control characters, any code point
times = st.integers(min_value=0, max_value=2**53)
floats = st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f + 0.0)  # no -0.0:
# equal to 0.0, so which of the two a key keeps depends on arrival order (a catalogue has none)


def worker_rows(records: list[tuple]) -> dict[bytes, bytes]:
    """What a worker's dimension table held, in the layout before one row per version, after
    these records: each version inserted as the join's state did, the row written with Faust's
    json codec (orjson). :func:`history_rows` still writes it: old changelogs for the tests of
    their conversion."""
    histories: dict[str, list] = {}
    for key, *version in records:
        insert_version(histories.setdefault(key, []), list(version))
    return {orjson.dumps(k): orjson.dumps(h) for k, h in histories.items()}


def worker_version_rows(records: list[tuple]) -> dict[bytes, bytes]:
    """The version rows a worker's join state writes for these records (each a version of
    the movies spec's shape, through :class:`app.joins.state.JoinState`), as its changelog
    carries them."""
    from app.joins.catalog import movie_spec
    from app.joins.resolve import resolve
    from app.joins.state import JoinState
    from app.settings import Settings
    from app.state.overlay import MemoryIO, Overlay

    state = JoinState(
        resolve(movie_spec(Settings())),
        Overlay(MemoryIO(bytes_keys=False)),
        Overlay(MemoryIO()),
        Overlay(MemoryIO(bytes_keys=False)),
    )
    for key, t, *values in records:  # null values: an end (a tombstone), as archived
        state.on_version(0, key, [t] if values == [None] else [t, *values], None, None)
    return {k: v for _, _, k, v in state.joins.flush() if k[:1] == b"V" and v is not None}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(keys, times, st.one_of(texts, st.none())), max_size=40))
def test_version_rows_are_the_bytes_a_worker_writes_for_the_same_versions(records):
    rows = version_rows(records)
    assert dict(rows) == worker_version_rows(records)
    assert [k for k, _ in rows] == sorted(k for k, _ in rows)  # RocksDB's order
    assert len({k for k, _ in rows}) == len(rows)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(keys, times, texts), max_size=30))
def test_the_arrow_version_rows_are_the_same_rows(records):
    import pyarrow as pa

    table = pa.table(
        {
            "k": pa.array([r[0] for r in records], pa.string()),
            "t": pa.array([r[1] for r in records], pa.int64()),
            "v": pa.array([r[2] for r in records], pa.string()),
        }
    )
    assert arrow_version_rows(table, ["k", "t", "v"]) == version_rows(records)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(keys, times, texts), max_size=40))
def test_rows_are_the_bytes_a_worker_writes_for_the_same_versions(records):
    rows = history_rows(records, ["int", "str"])
    assert dict(rows) == worker_rows(records)
    assert [k for k, _ in rows] == sorted(k for k, _ in rows)  # RocksDB's order
    assert len({k for k, _ in rows}) == len(rows)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", 'b"', "c\\"]),
            times,
            floats,
            st.booleans(),
            st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=30,
    )
)
def test_rows_of_floats_booleans_and_integers_too(records):
    assert dict(history_rows(records, ["int", "float", "bool", "int"])) == worker_rows(records)


def test_a_version_given_twice_is_kept_once_and_versions_sort_by_time_then_values():
    rows = dict(
        history_rows(
            [("m1", 5, "B"), ("m1", 3, "Z"), ("m1", 5, "A"), ("m1", 5, "B")], ["int", "str"]
        )
    )
    assert orjson.loads(rows[b'"m1"']) == [[3, "Z"], [5, "A"], [5, "B"]]


def test_the_offset_row_is_faust_s():
    assert OFFSET_KEY == Store.offset_key


def test_the_database_opens_read_only_and_holds_the_rows_and_the_offset(tmp_path):
    rows = history_rows([(f"m{i}", i, f"t{i}") for i in range(1000)], ["int", "str"])
    folder = tmp_path / "db"
    _database(folder, rows, 4321)
    assert read_offset(folder, Store.offset_key) == 4321
    db = rocksdict.Rdict(
        str(folder), rocksdict.Options(raw_mode=True), access_type=rocksdict.AccessType.read_only()
    )
    try:
        held = {k: v for k, v in db.items() if k != OFFSET_KEY}
    finally:
        db.close()
    assert held == dict(rows)
    assert not list(tmp_path.glob("*.sst")), "the SST file is removed once ingested"


def test_the_marker_round_trips_and_a_missing_one_is_none(tmp_path):
    snaps = Snapshots(f"file://{tmp_path}")
    assert snaps.bootstrap("t-changelog") is None
    m = BootstrapMarker("t-changelog", "job1", "running", 1, ["/lake/movies.parquet"])
    snaps.mark_bootstrap(m)
    assert snaps.bootstrap("t-changelog") == m
    done = BootstrapMarker(
        "t-changelog", "job1", "done", 1, ["/lake/movies.parquet"], 2, {"0": 41}, 42
    )
    snaps.mark_bootstrap(done)
    assert snaps.bootstrap("t-changelog") == done
    assert snaps.list("t-changelog") == []  # a marker is not a snapshot


def test_a_store_that_does_not_answer_is_not_a_missing_marker(tmp_path):
    class Broken(FileStore):
        def get_bytes(self, key: str) -> bytes:
            raise SnapshotError("connection refused")

    with pytest.raises(SnapshotError) as err:
        Snapshots("file:///x", Broken(tmp_path)).bootstrap("t-changelog")
    assert not isinstance(err.value, MissingObject)


async def test_a_worker_waits_while_the_bootstrap_is_running_or_failed(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(snapshot_service, "BOOTSTRAP_POLL_S", 0.05)
    snaps = Snapshots(f"file://{tmp_path}")
    service = SnapshotService(SimpleNamespace(conf=SimpleNamespace(tabledir=tmp_path)), snaps, 1)
    table = SimpleNamespace(changelog_topic=SimpleNamespace(get_topic_name=lambda: "t-cl"))
    plain = SimpleNamespace(changelog_topic=SimpleNamespace(get_topic_name=lambda: "other-cl"))

    await asyncio.wait_for(service._wait_for_bootstrap([plain]), 1)  # never bootstrapped
    assert service.not_bootstrapping == {"other-cl"}  # not asked again (a job then refuses)
    snaps.mark_bootstrap(BootstrapMarker("t-cl", "j", "running", 1, ["a"]))
    caplog.set_level(logging.WARNING)
    waiting = asyncio.create_task(service._wait_for_bootstrap([table]))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    snaps.mark_bootstrap(BootstrapMarker("t-cl", "j", "failed", 1, ["a"], error="OOM"))
    await asyncio.sleep(0.3)
    assert not waiting.done(), "a failed bootstrap left a half-written table: keep waiting"
    snaps.mark_bootstrap(BootstrapMarker("t-cl", "j", "done", 1, ["a"], 2))
    await asyncio.wait_for(waiting, 2)
    assert "bootstrap job j running" in caplog.text
    assert service.not_bootstrapping == {"other-cl", "t-cl"}


async def test_a_store_that_does_not_answer_holds_the_worker_back_a_while_only(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(snapshot_service, "BOOTSTRAP_POLL_S", 0.05)
    monkeypatch.setattr(snapshot_service, "BOOTSTRAP_UNREADABLE_S", 0.3)

    class Down(FileStore):
        def get_bytes(self, key: str) -> bytes:
            raise SnapshotError("connection refused")

    service = SnapshotService(
        SimpleNamespace(conf=SimpleNamespace(tabledir=tmp_path)),
        Snapshots("file:///x", Down(tmp_path)),
        1,
    )
    table = SimpleNamespace(changelog_topic=SimpleNamespace(get_topic_name=lambda: "t-cl"))
    caplog.set_level(logging.WARNING)
    began = asyncio.get_running_loop().time()
    await asyncio.wait_for(service._wait_for_bootstrap([table]), 5)
    assert asyncio.get_running_loop().time() - began >= 0.3
    assert "reading the table without knowing whether a bootstrap job is writing it" in caplog.text


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", 'b"', "c\\", "é", "k\n", "z", "zz"]), st.integers(0, 5), texts
        ),
        max_size=40,
    )
)
def test_the_vectorized_rows_are_the_same_rows(records):
    """arrow_rows writes most rows with Arrow's kernels, the rest as history_rows does: the
    same rows, in the same order, whatever mix of repeated keys and escapes."""
    import pyarrow as pa

    table = pa.table(
        {
            "k": pa.array([r[0] for r in records], pa.string()),
            "t": pa.array([r[1] for r in records], pa.int64()),
            "v": pa.array([r[2] for r in records], pa.string()),
        }
    )
    assert arrow_rows(table, ["k", "t", "v"], ["int", "str"]) == history_rows(
        records, ["int", "str"]
    )

"""app.state.snapshot_store: snapshots of table partitions in an object store (file://, and s3:// on moto).

A snapshot is a RocksDB checkpoint of one partition's database, which holds Faust's offset row;
these tests build real rocksdict databases, checkpoint them, and check what comes back.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import rocksdict

from app.state.snapshot_store import (
    FORMAT,
    Manifest,
    SnapshotError,
    Snapshots,
    fingerprint,
    open_store,
    read_offset,
    refusal,
)

OFFSET_KEY = b"__faust\0offset__"  # faust.stores.rocksdb.Store.offset_key
TOPIC = "etj-mood-history-changelog"


def partition_db(path: Path, rows: dict[bytes, bytes], offset: int | None) -> rocksdict.Rdict:
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
    for k, v in rows.items():
        db.put(k, v)
    if offset is not None:
        db.put(OFFSET_KEY, str(offset).encode())
    return db


def checkpoint(tmp_path: Path, rows: dict[bytes, bytes], offset: int, name: str = "cp") -> Path:
    db = partition_db(tmp_path / f"{name}-live.db", rows, offset)
    dest = tmp_path / name
    rocksdict.Checkpoint(db).create_checkpoint(str(dest))
    db.close()
    return dest


def dump(path: Path) -> dict[bytes, bytes]:
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
    try:
        return {k: v for k, v in db.items() if k != OFFSET_KEY}
    finally:
        db.close()


@pytest.fixture
def snaps(tmp_path: Path) -> Snapshots:
    return Snapshots(f"file://{tmp_path / 'store'}")


ROWS = {f"c{i}".encode(): f'[[{i}, "happy"]]'.encode() for i in range(500)}


def test_a_checkpoint_goes_up_and_comes_back_with_its_rows_and_offset(tmp_path, snaps):
    cp = checkpoint(tmp_path, ROWS, offset=499)
    m = snaps.upload(cp, TOPIC, 2, 499, fingerprint(table="h"), created_ms=1000)

    assert [x.id for x in snaps.list()] == [m.id] == ["00000000000000000499-1000"]
    got = snaps.list(TOPIC, 2)[0]
    assert (got.table, got.partition, got.offset, got.created_ms) == (TOPIC, 2, 499, 1000)
    assert got.size == sum(p.stat().st_size for p in cp.rglob("*") if p.is_file()) > 0
    assert snaps.list(TOPIC, 1) == []

    dest = tmp_path / "restored"
    snaps.download(got, dest)
    assert dump(dest) == ROWS
    assert read_offset(dest, OFFSET_KEY) == 499


def test_newest_is_last_by_offset_and_prune_keeps_the_newest(tmp_path, snaps):
    for offset in (9, 120, 30, 77):  # ids sort by offset, not by upload order
        snaps.upload(checkpoint(tmp_path, ROWS, offset, f"cp{offset}"), TOPIC, 0, offset, "f")
    assert [m.offset for m in snaps.list(TOPIC, 0)] == [9, 30, 77, 120]
    # an upload cut short (files, no manifest) below the kept ones is garbage; above, in flight
    store = snaps.store
    store.put_bytes(f"{TOPIC}/0/00000000000000000001-5/000001.sst", b"x")
    store.put_bytes(f"{TOPIC}/0/00000000000000000999-5/000001.sst", b"x")

    doomed = snaps.prune(TOPIC, 0, keep=2)

    assert [m.offset for m in snaps.list(TOPIC, 0)] == [77, 120]
    assert [d.split("-")[0].lstrip("0") for d in doomed] == ["1", "9", "30"]
    left = {k.split("/")[2] for k, _ in store.list(f"{TOPIC}/0/")}
    assert left == {m.id for m in snaps.list(TOPIC, 0)} | {"00000000000000000999-5"}


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_a_damaged_snapshot_is_refused_on_download(tmp_path, snaps, damage):
    m = snaps.upload(checkpoint(tmp_path, ROWS, 499), TOPIC, 0, 499, "f")
    root = tmp_path / "store" / m.prefix
    victim = max(
        (p for p in root.iterdir() if p.name != "manifest.json"), key=lambda p: p.stat().st_size
    )
    data = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        victim.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    else:
        victim.unlink()
    with pytest.raises(SnapshotError):
        snaps.download(m, tmp_path / "restored")


def test_read_offset_refuses_a_folder_that_is_no_database(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "CURRENT").write_text("nothing\n")
    with pytest.raises(SnapshotError):
        read_offset(tmp_path / "junk", OFFSET_KEY)


def test_an_unreadable_manifest_is_skipped_not_fatal(tmp_path, snaps):
    snaps.upload(checkpoint(tmp_path, ROWS, 5), TOPIC, 0, 5, "f")
    snaps.store.put_bytes(f"{TOPIC}/0/00000000000000000009-1/manifest.json", b"{not json")
    assert [m.offset for m in snaps.list(TOPIC, 0)] == [5]


def m_at(offset: int, fp: str = "f", fmt: int = FORMAT) -> Manifest:
    return Manifest(TOPIC, 0, offset, fp, 0, {}, fmt)


@pytest.mark.parametrize(
    "manifest, earliest, highwater, reason",
    [
        (m_at(99), 0, 150, None),
        (m_at(99), 100, 150, None),  # the next record (100) is the first kept: usable
        (m_at(99), 101, 150, "older than the changelog's retention"),
        (m_at(99, fp="g"), 0, 150, "table layout"),
        (m_at(99, fmt=FORMAT + 1), 0, 150, "manifest format"),
        (m_at(150), 0, 150, "ahead of the changelog"),
        (m_at(99), None, 150, "unknown"),
    ],
)
def test_refusal(manifest, earliest, highwater, reason):
    got = refusal(manifest, fingerprint="f", earliest=earliest, highwater=highwater)
    assert (got is None) if reason is None else (reason in got)


def test_fingerprint_changes_with_the_layout():
    a = fingerprint(table="h", key_serializer="json", partitions=4)
    assert a == fingerprint(partitions=4, key_serializer="json", table="h")
    assert a != fingerprint(table="h", key_serializer="raw", partitions=4)
    assert a != fingerprint(table="h", key_serializer="json", partitions=8)


def test_open_store_urls(tmp_path):
    assert open_store(f"file://{tmp_path}").root == tmp_path
    for bad in ("http://x/y", "s3://", "/plain/path"):
        with pytest.raises(ValueError):
            open_store(bad)


def test_s3_store_on_moto(tmp_path, monkeypatch):
    moto = pytest.importorskip("moto")  # the test extra has it
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "etj")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "etj")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        import boto3

        boto3.client("s3").create_bucket(Bucket="snaps")
        snaps = Snapshots("s3://snaps/etj/prod")
        for offset in (10, 20):
            snaps.upload(checkpoint(tmp_path, ROWS, offset, f"cp{offset}"), TOPIC, 3, offset, "f")
        keys = [k["Key"] for k in boto3.client("s3").list_objects_v2(Bucket="snaps")["Contents"]]
        assert all(k.startswith(f"etj/prod/{TOPIC}/3/") for k in keys)
        assert [m.offset for m in snaps.list()] == [10, 20]
        oldest = snaps.list(TOPIC, 3)[0]
        assert snaps.prune(TOPIC, 3, keep=1) == [oldest.id]
        assert [m.offset for m in snaps.list(TOPIC, 3)] == [20]
        newest = snaps.list(TOPIC, 3)[-1]
        snaps.download(newest, tmp_path / "restored")
        assert dump(tmp_path / "restored") == ROWS
        assert read_offset(tmp_path / "restored", OFFSET_KEY) == 20


def test_the_snapshots_command_prints_one_row_per_snapshot():
    from app.commands.snapshots import lines

    got = lines(
        [
            Manifest(
                TOPIC, 1, 4242, "f", 1_790_000_000_000, {"a.sst": {"size": 1234567, "sha256": ""}}
            )
        ]
    )
    assert got[0].split() == ["table", "partition", "offset", "taken", "(UTC)", "bytes", "id"]
    assert got[1].split() == [
        TOPIC,
        "1",
        "4242",
        "2026-09-21",
        "14:13:20",
        "1,234,567",
        "00000000000000004242-1790000000000",
    ]

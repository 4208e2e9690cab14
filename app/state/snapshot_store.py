"""Snapshots of table partitions in object storage: a new worker starts from one, not from zero.

A worker with nothing on disk rebuilds a table partition by replaying its whole changelog, one
record at a time. A snapshot is a RocksDB checkpoint of one partition's database, which carries
Faust's own changelog offset inside it (``Store.offset_key``): installed where Faust expects the
partition, Faust replays only the changelog records after that offset. This module knows
nothing of Faust: it names, uploads, lists, prunes, downloads and checks snapshots; what reaches
into Faust (taking the checkpoint, installing it before Faust opens the partition) is
:mod:`app.state.snapshot_service`. Operating them: docs/operating/snapshots.md.

Layout in the store (``ETJ_SNAPSHOT_URL``, ``file:///path`` or ``s3://bucket/prefix``)::

    <changelog topic>/<partition>/<offset, 20 digits>-<created ms>/manifest.json
    <changelog topic>/<partition>/<offset, 20 digits>-<created ms>/<checkpoint files>

    <changelog topic>/bootstrap.json            (a table built by ``app.batch bootstrap``)

Snapshot ids sort by offset. The manifest is written last, so a snapshot without one (an
upload cut short) is never listed, and is deleted by the next prune. The manifest says the
table, partition, offset, a fingerprint of the table's layout, the creation time and every
file with its size and SHA-256; a download that does not match it is refused.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

__all__ = [
    "FORMAT",
    "BootstrapMarker",
    "Manifest",
    "SnapshotError",
    "Snapshots",
    "fingerprint",
    "open_store",
    "refusal",
]

log = logging.getLogger(__name__)

#: version of the manifest and of how a checkpoint is laid out; part of every fingerprint
FORMAT = 1
MANIFEST = "manifest.json"


class SnapshotError(Exception):
    """A snapshot that cannot be used: missing, unreadable, corrupt or of another layout."""


class MissingObject(SnapshotError):
    """The store has no object under the key (as opposed to a store that did not answer)."""


def fingerprint(**layout: Any) -> str:
    """A short hash of what makes a table partition's bytes mean what they mean (table name,
    serializers, partition count, join layout...) and :data:`FORMAT`: a snapshot is installed
    only into a table with the same fingerprint."""
    text = json.dumps({"format": FORMAT, **layout}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Manifest:
    """What one snapshot holds. ``offset``: the last changelog offset it includes."""

    table: str  # the changelog topic
    partition: int
    offset: int
    fingerprint: str
    created_ms: int
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {size, sha256}
    format: int = FORMAT

    @property
    def id(self) -> str:
        return snapshot_id(self.offset, self.created_ms)

    @property
    def size(self) -> int:
        return sum(int(f["size"]) for f in self.files.values())

    @property
    def prefix(self) -> str:
        return f"{partition_prefix(self.table, self.partition)}{self.id}/"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        d = json.loads(data)
        return cls(
            table=str(d["table"]),
            partition=int(d["partition"]),
            offset=int(d["offset"]),
            fingerprint=str(d["fingerprint"]),
            created_ms=int(d["created_ms"]),
            files=dict(d["files"]),
            format=int(d.get("format", 0)),
        )


@dataclass(frozen=True)
class BootstrapMarker:
    """A table's first state, built by ``python -m app.batch bootstrap``
    (:mod:`app.batch.bootstrap`): ``running`` from before its first changelog row is written
    until every partition's snapshot is uploaded, then ``done``; ``failed`` when the job
    stopped on an error. A worker installs no snapshot of the table and replays none of its
    changelog while it is not ``done`` (:meth:`app.state.snapshot_service.SnapshotService.restore`
    waits): nothing a worker reads is half written."""

    table: str  # the changelog topic
    job: str
    state: str  # running | done | failed
    started_ms: int
    inputs: list[str] = field(default_factory=list)
    finished_ms: int | None = None
    offsets: dict[str, int] = field(default_factory=dict)  # partition -> last changelog offset
    keys: int = 0
    error: str | None = None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BootstrapMarker:
        d = json.loads(data)
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @staticmethod
    def key(table: str) -> str:
        return f"{table}/bootstrap.json"


def snapshot_id(offset: int, created_ms: int) -> str:
    return f"{offset:020d}-{created_ms}"


def partition_prefix(table: str, partition: int) -> str:
    return f"{table}/{partition}/"


def refusal(
    m: Manifest, *, fingerprint: str, earliest: int | None, highwater: int | None
) -> str | None:
    """Why snapshot ``m`` must not be installed (None: it may). ``earliest``: the changelog
    partition's log-start offset; ``highwater``: its end offset (the next offset written)."""
    if m.format != FORMAT:
        return f"manifest format {m.format}, this worker reads {FORMAT}"
    if m.fingerprint != fingerprint:
        return (
            f"table layout {m.fingerprint} differs from this worker's {fingerprint} "
            "(another table definition, serializer or partition count)"
        )
    if earliest is None or highwater is None:
        return "the changelog's offsets are unknown"
    if m.offset + 1 < earliest:
        return (
            f"older than the changelog's retention: it covers up to offset {m.offset}, "
            f"the changelog starts at {earliest} (records in between are gone)"
        )
    if m.offset >= highwater:
        return (
            f"ahead of the changelog: offset {m.offset}, the changelog ends at {highwater} "
            "(was the topic recreated?)"
        )
    return None


# --- object stores ------------------------------------------------------------------------------


class ObjectStore(Protocol):
    """The five operations snapshots need, over keys relative to the store's URL."""

    def put_file(self, local: Path, key: str) -> None: ...
    def get_file(self, key: str, local: Path) -> None: ...
    def put_bytes(self, key: str, data: bytes) -> None: ...
    def get_bytes(self, key: str) -> bytes: ...
    def list(self, prefix: str) -> list[tuple[str, int]]: ...  # (key, size), sorted
    def delete(self, keys: Iterable[str]) -> None: ...


class FileStore:
    """``file:///path``: a folder (a mounted volume, or tests)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key

    def put_file(self, local: Path, key: str) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        shutil.copyfile(local, tmp)
        os.replace(tmp, dest)

    def get_file(self, key: str, local: Path) -> None:
        try:
            shutil.copyfile(self._path(key), local)
        except FileNotFoundError as exc:
            raise MissingObject(f"missing object {key}") from exc

    def put_bytes(self, key: str, data: bytes) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, dest)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as exc:
            raise MissingObject(f"missing object {key}") from exc

    def list(self, prefix: str) -> list[tuple[str, int]]:
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return []
        out = []
        for path in base.rglob("*"):
            if path.is_file() and not path.name.endswith(".part"):
                out.append((path.relative_to(self.root).as_posix(), path.stat().st_size))
        return sorted(out)

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            path = self._path(key)
            path.unlink(missing_ok=True)
            parent = path.parent  # drop the snapshot's folder once it is empty
            while parent != self.root and parent.exists() and not any(parent.iterdir()):
                parent.rmdir()
                parent = parent.parent


class S3Store:
    """``s3://bucket/prefix`` through boto3: endpoint, region and credentials the usual boto3
    way (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, a role...)."""

    def __init__(self, bucket: str, prefix: str) -> None:
        import boto3  # only a worker with an s3:// snapshot URL needs it
        from boto3.s3.transfer import TransferConfig

        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = boto3.client("s3")
        self.transfer = TransferConfig(max_concurrency=8, multipart_chunksize=16 * 2**20)

    def put_file(self, local: Path, key: str) -> None:
        self.client.upload_file(str(local), self.bucket, self.prefix + key, Config=self.transfer)

    def get_file(self, key: str, local: Path) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.download_file(
                self.bucket, self.prefix + key, str(local), Config=self.transfer
            )
        except ClientError as exc:
            raise SnapshotError(f"cannot read object {key}: {exc}") from exc

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def get_bytes(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            kind = MissingObject if code in ("NoSuchKey", "404") else SnapshotError
            raise kind(f"cannot read object {key}: {exc}") from exc

    def list(self, prefix: str) -> list[tuple[str, int]]:
        out = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix
        )
        for page in pages:
            for obj in page.get("Contents", ()):
                out.append((obj["Key"][len(self.prefix) :], int(obj["Size"])))
        return sorted(out)

    def delete(self, keys: Iterable[str]) -> None:
        keys = [self.prefix + k for k in keys]
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )


def open_store(url: str) -> ObjectStore:
    """The object store of a snapshot URL: ``file:///path`` or ``s3://bucket/prefix``."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return FileStore(Path(parsed.netloc + parsed.path if parsed.netloc else parsed.path))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"snapshot URL {url!r} names no bucket (s3://bucket/prefix)")
        return S3Store(parsed.netloc, parsed.path)
    raise ValueError(f"snapshot URL {url!r}: use file:///path or s3://bucket/prefix")


# --- snapshots --------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            h.update(chunk)
    return h.hexdigest()


class Snapshots:
    """The snapshots under one URL."""

    def __init__(self, url: str, store: ObjectStore | None = None) -> None:
        self.url = url
        self.store = store if store is not None else open_store(url)

    def upload(
        self,
        checkpoint: Path,
        table: str,
        partition: int,
        offset: int,
        fingerprint: str,
        created_ms: int | None = None,
    ) -> Manifest:
        """Upload a checkpoint folder as the snapshot of (table, partition) at ``offset``;
        its manifest last, so a cut-short upload is never listed."""
        created = int(time.time() * 1000) if created_ms is None else created_ms
        m = Manifest(table, partition, offset, fingerprint, created)
        files = {}
        for path in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
            name = path.relative_to(checkpoint).as_posix()
            files[name] = {"size": path.stat().st_size, "sha256": _sha256(path)}
            self.store.put_file(path, m.prefix + name)
        m = Manifest(table, partition, offset, fingerprint, created, files)
        self.store.put_bytes(m.prefix + MANIFEST, m.to_json())
        return m

    def list(
        self, table: str | None = None, partition: int | None = None
    ) -> builtins.list[Manifest]:
        """Every complete snapshot (those with a readable manifest), oldest first."""
        prefix = (
            ""
            if table is None
            else (f"{table}/" if partition is None else partition_prefix(table, partition))
        )
        out = []
        for key, _ in self.store.list(prefix):
            if key.rsplit("/", 1)[-1] != MANIFEST:
                continue
            try:
                out.append(Manifest.from_json(self.store.get_bytes(key)))
            except (SnapshotError, ValueError, KeyError, TypeError) as exc:
                log.warning("snapshot manifest %s is unreadable, ignored: %s", key, exc)
        return sorted(out, key=lambda m: (m.table, m.partition, m.offset, m.created_ms))

    def prune(self, table: str, partition: int, keep: int) -> builtins.list[str]:
        """Delete all but the newest ``keep`` snapshots of (table, partition), and anything
        older than them without a manifest (cut-short uploads); the deleted ids."""
        prefix = partition_prefix(table, partition)
        by_id: dict[str, list[str]] = {}
        for key, _ in self.store.list(prefix):
            by_id.setdefault(key[len(prefix) :].split("/", 1)[0], []).append(key)
        complete = sorted(i for i, keys in by_id.items() if f"{prefix}{i}/{MANIFEST}" in keys)
        kept = set(complete[-keep:]) if keep > 0 else set()
        oldest_kept = min(kept) if kept else None
        doomed = [
            i
            for i in sorted(by_id)
            if i not in kept and (i in complete or (oldest_kept is not None and i < oldest_kept))
        ]
        for i in doomed:  # the manifest first: a half-deleted snapshot is never listed
            keys = by_id[i]
            self.store.delete([k for k in keys if k.endswith("/" + MANIFEST)])
            self.store.delete([k for k in keys if not k.endswith("/" + MANIFEST)])
        return doomed

    def bootstrap(self, table: str) -> BootstrapMarker | None:
        """The bootstrap marker of ``table`` (None: the table was never bootstrapped)."""
        try:
            data = self.store.get_bytes(BootstrapMarker.key(table))
        except MissingObject:
            return None
        return BootstrapMarker.from_json(data)

    def mark_bootstrap(self, marker: BootstrapMarker) -> None:
        self.store.put_bytes(BootstrapMarker.key(marker.table), marker.to_json())

    def download(self, m: Manifest, dest: Path) -> None:
        """Every file of ``m`` into the new folder ``dest``, each checked against the manifest
        (size and SHA-256); :class:`SnapshotError` if one is missing or differs."""
        dest.mkdir(parents=True)
        for name, meta in sorted(m.files.items()):
            path = dest / name
            if ".." in Path(name).parts or Path(name).is_absolute():
                raise SnapshotError(f"snapshot {m.id}: unsafe file name {name!r}")
            path.parent.mkdir(parents=True, exist_ok=True)
            self.store.get_file(m.prefix + name, path)
            size = path.stat().st_size
            if size != int(meta["size"]):
                raise SnapshotError(
                    f"snapshot {m.id}: {name} has {size} bytes, the manifest "
                    f"says {meta['size']} (truncated?)"
                )
            if _sha256(path) != meta["sha256"]:
                raise SnapshotError(f"snapshot {m.id}: {name} does not match its checksum")


def read_offset(db_path: Path, offset_key: bytes) -> int | None:
    """The changelog offset a RocksDB partition database holds under Faust's ``offset_key``
    (it also proves the database opens)."""
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    try:
        db = rocksdict.Rdict(str(db_path), opts, access_type=rocksdict.AccessType.read_only())
    except Exception as exc:  # rocksdict raises its own exception types
        raise SnapshotError(f"the snapshot's database does not open: {exc}") from exc
    try:
        value = db.get(offset_key)
        return None if value is None else int(value)
    finally:
        db.close()

"""Snapshots of RocksDB table partitions in object storage: taken from the live store on a timer,
installed before Faust opens a partition it has no local state for.

Upstream behaviour (faust-streaming 0.15.3, ``faust/stores/rocksdb.py``,
``faust/tables/manager.py``, ``faust/tables/recovery.py``): the RocksDB store keeps one rocksdict
``Rdict`` per table partition at ``Store.partition_path(p)``, opened lazily by
``Store._db_for_partition``, and the changelog offset it holds is a row of that database
(``Store.offset_key``, written by ``set_persisted_offset``). On a rebalance
``TableManager.on_rebalance`` calls every table's ``on_rebalance`` (the store opens the newly
assigned active partitions), then ``Recovery.on_rebalance``, which reads each partition's
persisted offset and replays the changelog from there. Faust's own backups
(``backup_partition``) are not supported with rocksdict and stay on the local disk.

Why: a worker with an empty disk replays every changelog from offset 0, one record at a time
(hours for hundreds of millions of keys). Two things here, both reaching into the store:

- **writing**: every ``ETJ_SNAPSHOT_INTERVAL_S`` a timer takes a RocksDB checkpoint (hard links,
  local, milliseconds) of each active partition whose offset moved, reading the offset row in the
  same synchronous step, then uploads it on a thread (:mod:`app.state.snapshot_store`); the join never
  waits for the upload. A checkpoint holds what the store holds: the values of every changelog
  record up to its offset, and possibly a few writes whose changelog records were not yet
  acknowledged. The replay after the offset rewrites those keys with what the changelog says,
  exactly as when Faust restarts on a kept volume.
- **restoring**: etj's table manager (:mod:`app.compat.table_manager`) calls
  :meth:`SnapshotService.restore` first on a rebalance: before the stores open their
  partitions, each newly assigned *active* partition with nothing at its ``partition_path`` gets
  the newest usable snapshot downloaded, checked (sizes, SHA-256, the offset row equals the
  manifest's) and renamed into place; Faust then reads the offset from it and replays only the
  tail. A snapshot of another table layout (fingerprint), older than the changelog's retention
  (its offset below the log-start offset), ahead of the changelog, or unreadable is refused with
  a log line, and Faust does its ordinary full replay. ``/ready/`` answers 503 meanwhile
  (:func:`restoring`).

The store's partition databases are read through :func:`app.compat.stores.open_partitions`
(no public API lists them). Tests: tests/unit/test_snapshots.py (store, manifest, refusals, a
checkpoint of a real Rdict), tests/broker/test_snapshots.py (kill -9, empty datadir, restore
equals a full replay key for key; corrupt and stale snapshots fall back to a full replay).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import rocksdict
from faust.stores.rocksdb import Store as RocksDBStore
from faust.types import TP

from app.compat.stores import open_partitions
from app.state.snapshot_store import (
    Manifest,
    SnapshotError,
    Snapshots,
    fingerprint,
    read_offset,
    refusal,
)

__all__ = ["SnapshotService", "install", "restoring", "service_of", "table_fingerprint"]

log = logging.getLogger(__name__)

WORKDIR = ".etj-snapshots"  # under Faust's tabledir: same filesystem, so checkpoints hard-link
BOOTSTRAP_POLL_S = 2.0  # how often a worker looks whether a bootstrap job it waits for is done
BOOTSTRAP_SAY_S = 30.0  # how often it says it still waits
#: how long a marker that cannot be read (the store does not answer) holds the worker back: an
#: unreachable store must not stop the join, as snapshots that cannot be listed do not
BOOTSTRAP_UNREADABLE_S = 60.0

_restoring = 0


def service_of(app: Any) -> SnapshotService | None:
    """``app``'s snapshot service (None: snapshots are off): its ``table_snapshots``, which
    :func:`install` sets and etj's table manager reads (it imports nothing of this module)."""
    return getattr(app, "table_snapshots", None)


def restoring() -> bool:
    """True while snapshots are being downloaded and installed (the worker is not ready)."""
    return _restoring > 0


def _serializer(table: Any, which: str) -> str:
    value = getattr(table, which, None)
    if value is None and getattr(table, "schema", None) is not None:
        value = getattr(table.schema, which, None)
    return str(value)


def table_fingerprint(table: Any, partitions: int) -> str:
    """The layout of ``table``'s bytes: a snapshot of another layout is never installed."""
    # a table whose rows changed layout names it (app.joins.state: JoinsTable.state_layout)
    extra = {"state_layout": table.state_layout} if getattr(table, "state_layout", None) else {}
    return fingerprint(
        table=table.name,
        key_serializer=_serializer(table, "key_serializer"),
        value_serializer=_serializer(table, "value_serializer"),
        key_type=getattr(table.key_type, "__name__", str(table.key_type)),
        value_type=getattr(table.value_type, "__name__", str(table.value_type)),
        partitions=partitions,
        driver="rocksdict",
        **extra,
    )


def _rocksdb_tables(app: Any) -> list[Any]:
    return [
        t for t in app.tables.values() if isinstance(t.data, RocksDBStore) and t.data.use_rocksdict
    ]


class SnapshotService:
    """One worker's snapshot writer and restorer."""

    def __init__(self, app: Any, snapshots: Snapshots, keep: int) -> None:
        self.app = app
        self.snapshots = snapshots
        self.keep = keep
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="etj-snapshot")
        self.uploaded: dict[TP, int] = {}  # the offset of each partition's last snapshot
        self.busy = False
        #: tables whose bootstrap is done, or that have none: a job refuses to start while the
        #: join's group has a member, so this worker need not ask again
        self.not_bootstrapping: set[str] = set()

    @property
    def workdir(self) -> Path:
        return Path(self.app.conf.tabledir) / WORKDIR

    def fingerprint(self, table: Any) -> str:
        return table_fingerprint(table, table.partitions or self.app.conf.topic_partitions)

    # --- writing --------------------------------------------------------------------------

    def checkpoints(self) -> list[tuple[Any, TP, int, Path]]:
        """A checkpoint of every active partition whose offset moved since its last snapshot:
        (table, tp, offset, folder). Synchronous: the offset row and the checkpoint are read
        with no write in between."""
        app = self.app
        if not app.tables.recovery.completed.is_set() or app.rebalancing or app.in_recovery:
            return []
        actives = app.assignor.assigned_actives()
        out = []
        for table in _rocksdb_tables(app):
            store = table.data
            topic = table.changelog_topic.get_topic_name()
            for partition, db in list(open_partitions(store).items()):
                tp = TP(topic, partition)
                if tp not in actives:
                    continue
                raw = db.get(store.offset_key)
                if raw is None or self.uploaded.get(tp) == int(raw):
                    continue
                folder = self.workdir / f"{topic}-{partition}-{int(raw)}-{time.time_ns()}"
                folder.parent.mkdir(parents=True, exist_ok=True)
                rocksdict.Checkpoint(db).create_checkpoint(str(folder))
                out.append((table, tp, int(raw), folder))
        return out

    def _upload(self, table: Any, tp: TP, offset: int, folder: Path) -> Manifest | None:
        try:
            existing = self.snapshots.list(tp.topic, tp.partition)
            if existing and existing[-1].offset == offset:
                return None  # another start already snapshotted this offset
            t0 = time.monotonic()
            m = self.snapshots.upload(
                folder, tp.topic, tp.partition, offset, self.fingerprint(table)
            )
            pruned = self.snapshots.prune(tp.topic, tp.partition, self.keep)
            log.info(
                "snapshot of %s[%d] at offset %d: %d bytes in %.1f s (pruned %d)",
                tp.topic,
                tp.partition,
                offset,
                m.size,
                time.monotonic() - t0,
                len(pruned),
            )
            return m
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def write(self) -> None:
        """Take the checkpoints now, upload them on the snapshot thread."""
        if self.busy:
            return
        self.busy = True
        try:
            loop = asyncio.get_running_loop()
            for table, tp, offset, folder in self.checkpoints():
                try:
                    await loop.run_in_executor(
                        self.executor, self._upload, table, tp, offset, folder
                    )
                    self.uploaded[tp] = offset
                except Exception as exc:  # an unreachable store must not stop the join
                    log.warning(
                        "snapshot of %s[%d] at offset %d failed: %r",
                        tp.topic,
                        tp.partition,
                        offset,
                        exc,
                    )
        finally:
            self.busy = False

    # --- restoring ------------------------------------------------------------------------

    def _install(self, table: Any, tp: TP, m: Manifest) -> None:
        """Download ``m`` and rename it to the partition's path (SnapshotError if unusable)."""
        store = table.data
        target = Path(store.partition_path(tp.partition))
        tmp = self.workdir / f"restore-{tp.topic}-{tp.partition}-{time.time_ns()}"
        try:
            self.snapshots.download(m, tmp)
            offset = read_offset(tmp, store.offset_key)
            if offset != m.offset:
                raise SnapshotError(
                    f"its database holds offset {offset}, the manifest says {m.offset}"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    async def _restore_one(
        self, table: Any, tp: TP, earliest: int | None, highwater: int | None
    ) -> None:
        loop = asyncio.get_running_loop()
        where = f"{tp.topic}[{tp.partition}]"
        try:
            candidates = await loop.run_in_executor(
                None, self.snapshots.list, tp.topic, tp.partition
            )
        except Exception as exc:
            log.warning(
                "snapshots of %s cannot be listed (%r): full replay of its changelog", where, exc
            )
            return
        if not candidates:
            log.info("no snapshot of %s: full replay of its changelog", where)
            return
        fp = self.fingerprint(table)
        for m in reversed(candidates):  # newest first
            reason = refusal(m, fingerprint=fp, earliest=earliest, highwater=highwater)
            if reason is None:
                t0 = time.monotonic()
                try:
                    await loop.run_in_executor(None, self._install, table, tp, m)
                except Exception as exc:
                    reason = f"unreadable: {exc}"
                else:
                    log.info(
                        "restored %s from snapshot %s (offset %d, %d bytes) in %.1f s; "
                        "the changelog is replayed from there",
                        where,
                        m.id,
                        m.offset,
                        m.size,
                        time.monotonic() - t0,
                    )
                    return
            log.warning("snapshot %s of %s not used: %s", m.id, where, reason)
        log.warning("no usable snapshot of %s: full replay of its changelog", where)

    async def _wait_for_bootstrap(self, tables: list[Any]) -> None:
        """A table a bootstrap job (``python -m app.batch bootstrap``) is building, or left half
        built, is not read until the job is done: its snapshots are not all there and its
        changelog is still being written (:class:`app.state.snapshot_store.BootstrapMarker`)."""
        loop = asyncio.get_running_loop()
        for table in tables:
            topic = table.changelog_topic.get_topic_name()
            if topic in self.not_bootstrapping:
                continue
            began, said = time.monotonic(), 0.0
            while True:
                try:
                    marker = await loop.run_in_executor(None, self.snapshots.bootstrap, topic)
                    why = (
                        None
                        if marker is None or marker.state == "done"
                        else (
                            f"bootstrap job {marker.job} {marker.state}"
                            + (f" ({marker.error})" if marker.error else "")
                        )
                    )
                except Exception as exc:  # an unreachable store: wait a while, say so
                    why = f"its bootstrap marker is unreadable ({exc!r})"
                    if time.monotonic() - began >= BOOTSTRAP_UNREADABLE_S:
                        log.warning(
                            "table %s: %s for %.0f s: reading the table without "
                            "knowing whether a bootstrap job is writing it",
                            topic,
                            why,
                            time.monotonic() - began,
                        )
                        break
                if why is None:
                    self.not_bootstrapping.add(topic)
                    if said:
                        log.info(
                            "table %s: its bootstrap is done (waited %.0f s)",
                            topic,
                            time.monotonic() - began,
                        )
                    break
                now = time.monotonic()
                if not said or now - said >= BOOTSTRAP_SAY_S:
                    said = now
                    log.warning(
                        "table %s: %s; waited %.0f s, waiting until it is done before "
                        "reading the table (a failed job: run it again, "
                        "docs/operating/bootstrap.md)",
                        topic,
                        why,
                        now - began,
                    )
                await asyncio.sleep(BOOTSTRAP_POLL_S)

    async def restore(self, assigned: Iterable[TP]) -> None:
        """Install snapshots of the assigned active partitions this worker has no state for;
        first wait for any bootstrap job building one of the assigned tables."""
        app = self.app
        actives = app.assignor.assigned_actives()
        assigned = list(assigned)
        todo, touched = [], []
        for table in _rocksdb_tables(app):
            store = table.data
            topics = table.changelog_topic.topics
            opened = open_partitions(store)
            if any(tp.topic in topics for tp in assigned):
                touched.append(table)
            for tp in assigned:
                if (
                    tp.topic in topics
                    and tp in actives
                    and tp.partition not in opened
                    and not Path(store.partition_path(tp.partition)).exists()
                ):
                    todo.append((table, tp))
        global _restoring
        _restoring += 1
        try:
            await self._wait_for_bootstrap(touched)
            if not todo:
                return
            tps = [tp for _, tp in todo]
            try:
                earliest = await asyncio.wait_for(app.consumer.earliest_offsets(*tps), 30)
                highwaters = await asyncio.wait_for(app.consumer.highwaters(*tps), 30)
            except Exception as exc:
                log.warning("changelog offsets unknown (%r): snapshots are not used", exc)
                earliest, highwaters = {}, {}
            await asyncio.gather(
                *(
                    self._restore_one(table, tp, earliest.get(tp), highwaters.get(tp))
                    for table, tp in todo
                )
            )
        finally:
            _restoring -= 1


def install(app: Any) -> None:
    """With ``ETJ_SNAPSHOT_URL`` and ``rocksdb://``: write snapshots on a timer, restore them
    on assignment."""
    settings = app.etj
    if not settings.snapshot_url:
        return
    if not settings.local_tables:
        log.warning(
            "ETJ_SNAPSHOT_URL is set but the store is %s: snapshots need rocksdb://",
            settings.store_url,
        )
        return
    service = app.table_snapshots = SnapshotService(
        app, Snapshots(settings.snapshot_url), settings.snapshot_keep
    )
    shutil.rmtree(service.workdir, ignore_errors=True)  # checkpoints left by a killed worker

    async def write_snapshots() -> None:
        await service.write()

    app.timer(settings.snapshot_interval_s, name="etj.snapshots")(write_snapshots)

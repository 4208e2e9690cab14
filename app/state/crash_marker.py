"""A worker trusts the RocksDB state on its disk after a clean stop only.

Why: etj writes a table row to the local store during a batch and its changelog row at the
batch's end (:mod:`app.state.overlay`). A worker killed (kill -9, OOM, a lost node) between the two
leaves a local store *ahead* of its changelogs: rows of records whose batch never reached the
broker. Restarted on the same volume, Faust replays only the changelog after each table
partition's persisted offset, so some keys get their older changelog value back and others keep
the newer local one: a mix that no moment of the stream ever had. Re-delivered records write
their rows again (7f885f3), but that cannot undo a mix. Found by the 10-minute chaos run (run
18): after a kill -9 and restart, a recommendation's join row came back from the changelog while
its consultant's mood history kept a later local purge; the re-delivered tick then reviewed the
recommendation against that history and revised its correct mood to none, for good.

So, as Kafka Streams does under exactly-once (a task's state is wiped after an unclean
shutdown), a marker file in the table directory says a worker runs on it: :func:`claim` writes
it at start, :func:`release` removes it at a clean stop (every batch delivered, no row pending).
A worker that finds the marker at start deletes the table partitions' databases; Faust then
recovers them from the changelogs, or from snapshots (:mod:`app.state.snapshot_service`), as
for a new pod. The price is that recovery after a crash; a graceful stop (a rolling update)
keeps its state.

Tests: tests/unit/test_crash_marker.py; tests/broker/test_unclean_restart.py (kill -9 and a
restart on the same volume: state discarded, answers exact; a graceful stop: kept).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

__all__ = ["MARKER", "claim", "release"]

log = logging.getLogger(__name__)

#: in the table directory while a worker runs on it
MARKER = "RUNNING"


def claim(tabledir: Path) -> int:
    """Start on ``tabledir``: if the last worker did not stop cleanly, delete every table
    partition database in it (``*.db``); then mark it as in use. Returns how many were deleted."""
    tabledir.mkdir(parents=True, exist_ok=True)
    marker = tabledir / MARKER
    deleted = 0
    if marker.exists():
        for db in sorted(tabledir.glob("*.db")):
            shutil.rmtree(db, ignore_errors=True)
            deleted += 1
        log.warning(
            "the last worker on %s did not stop cleanly (its marker says %s): its local "
            "state may be ahead of the changelogs, so %d table partition databases were "
            "deleted and will be recovered from the changelogs (or snapshots)",
            tabledir,
            marker.read_text(errors="replace").strip() or "?",
            deleted,
        )
    marker.write_text(f"pid {os.getpid()}\n")
    return deleted


def release(tabledir: Path, clean: bool) -> None:
    """Stop: a ``clean`` stop (nothing handled left undelivered) removes the marker, so the next
    start keeps the state; otherwise it stays and the next start discards the state."""
    if clean:
        (tabledir / MARKER).unlink(missing_ok=True)
    else:
        log.warning(
            "stopping with handled records not all delivered: the next start on %s "
            "discards its local state",
            tabledir,
        )

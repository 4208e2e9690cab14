"""A changelog partition with nothing applied yet is read from its start, not refused.

Upstream (faust-streaming 0.15.3, ``faust.tables.recovery.Recovery``): ``_add`` sets a
partition's offset to its store's persisted offset or ``None``; ``_build_offsets`` replaces
``None`` by ``-1`` (nothing applied) for the partitions assigned when it runs, and
``_seek_offsets`` turns ``-1`` into 0 and seeks every partition to its offset. A standby
partition added by a rebalance during recovery can reach ``_seek_offsets`` still ``None``, and
aiokafka's ``seek`` refuses it (``ValueError: Offset must be a positive integer``): the recovery
service crashes and the worker exits 1. It takes a standby with no persisted offset, so it
showed once :mod:`app.local_state` started discarding a crashed worker's volume: in chaos runs
19 and 20 one restarted worker each crashed this way right after "Recovery complete" ("Starting
standby partitions...").

The patch: before Faust's seek, an offset that is ``None`` (or below -1) becomes ``-1``, Faust's
own "nothing applied", so the partition is read from its start. Tests:
tests/unit/test_standby_offsets.py. Remove when Faust's ``_seek_offsets`` handles ``None``.
"""

from __future__ import annotations

from typing import Any

from faust.tables.recovery import Recovery

__all__ = ["install"]

_original = Recovery._seek_offsets


async def _seek_offsets(self: Recovery, consumer: Any, tps: Any, offsets: Any,
                        title: str) -> None:
    for tp in tps:
        offset = offsets.get(tp)
        if offset is None or offset < -1:
            offsets[tp] = -1  # nothing applied: from the start
    await _original(self, consumer, tps, offsets, title)


def install() -> None:
    """Patch Faust's recovery (idempotent)."""
    Recovery._seek_offsets = _seek_offsets  # type: ignore[method-assign]

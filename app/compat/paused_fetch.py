"""Records of a partition Faust has paused stay in aiokafka: an empty set of active partitions
means none, not all.

Upstream (faust-streaming 0.15.3, ``Consumer._wait_next_records`` ->
``AIOKafkaConsumerThread._fetch_records``; aiokafka 0.14.0, ``Fetcher.fetched_records``): Faust
pauses a partition only in its own bookkeeping (``Consumer._active_partitions``) and asks
aiokafka for the records of the active ones, handing the consumer thread that *live* set.
aiokafka's ``fetched_records`` skips a partition only ``if partitions and tp not in
partitions``: an empty set means every partition. During a rebalance Faust pauses every
partition, so a fetch waiting then hands over what aiokafka prefetched for all of them and moves
their positions past it, and Faust's ``getmany`` drops those records as records of paused
partitions. Nothing reads them again unless a later seek does.

Symptoms (2026-11-26, traced with per-record logs): a new standby seeked to its changelog's start
lost offsets 0..56 that way, 0.14 s after the seek, and its worker later took the partition over
with rows missing (the 2-minute chaos test; :mod:`app.compat.changelog_holes` now reads such
holes again); and a worker taking over after a graceful stop had input records 437..1529 of a
partition dropped right after recovery had seeked its inputs to their committed offsets, so the
partition waited for :mod:`app.compat.stall_guard`, the corrections piled up when it resumed, and
a consultant's row of recent joins passed the 1 MB request limit (the graceful-stop test in CI on
2026-11-26; its failure of 2026-11-25 looked the same but was not traced).

Here aiokafka gets a view of the same live set that is never empty: membership is read from the
set when aiokafka drains each partition, as before, and an empty set excludes every partition.
Faust's client-only mode (no set: every partition) is left alone. A partition paused between
aiokafka's drain and Faust's hand-out can still lose records that way; the guards above stay.

Tests: tests/unit/test_paused_fetch.py (aiokafka's own ``fetched_records``: with every partition
paused it returns nothing and keeps the positions; a partition resumed meanwhile is returned).
Remove when Faust passes aiokafka a set it does not empty, or aiokafka stops reading an empty
set as every partition.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

__all__ = ["ActiveView", "install"]

_original = AIOKafkaConsumerThread._fetch_records


class ActiveView:
    """Faust's live set of active partitions, never "empty" to aiokafka."""

    __slots__ = ("tps",)

    def __init__(self, tps: Any) -> None:
        self.tps = tps

    def __bool__(self) -> bool:
        return True  # aiokafka reads an empty set as "every partition"

    def __contains__(self, tp: Any) -> bool:
        return tp in self.tps

    def __iter__(self) -> Any:
        return iter(self.tps)

    def __len__(self) -> int:
        return len(self.tps)


async def _fetch_records(self: AIOKafkaConsumerThread, consumer: Any, active_partitions: Any,
                         timeout: float | None = None, max_records: int | None = None) -> Any:
    if active_partitions is not None:
        active_partitions = ActiveView(active_partitions)
    return await _original(self, consumer, active_partitions, timeout=timeout,
                           max_records=max_records)


def install() -> None:
    AIOKafkaConsumerThread._fetch_records = _fetch_records  # type: ignore[method-assign]

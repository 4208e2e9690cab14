"""Flow control: co-partitioned inputs handled in event-time order when they have a backlog.

Why: under a backlog (a replay, a backfill, a restart after downtime) Faust hands an agent
whatever its fetches returned — hundreds of records of one topic before the other's. Drained one
input ahead, a partition's stream time runs forward until the other input's records are *late*
(dropped to the late topic) or are joined against a stale dimension (and corrected later). Kafka
Streams avoids it by taking, per task, the buffered record with the smallest timestamp across its
input partitions, and by waiting for an input it knows still has records in the broker
(``max.task.idle.ms``). Same rule here, per partition:

- each input's delivered records queue up in arrival order (one FIFO per input topic);
- when every input has a record queued, the smallest event time goes first (ties: the input
  listed first, the dimension);
- when an input has none queued, the others wait only if that input *is known* to have records
  in the broker not delivered yet (its high watermark is past the next offset expected), and
  at most ``max_idle_s``; then they go anyway. Past ``max_buffered`` records waiting in a
  partition, the engine stops fetching its inputs that have records queued (:meth:`full`)
  until the lagging one has caught up (Kafka Streams pauses a partition past
  ``buffered.records.per.partition`` the same way): one fetch can hold more records than the
  bound, and letting them go instead (the rule before batches) sent 10,549 of a 100,000-record
  backlog to etj-late.

Live traffic never waits: an input with no lag has nothing to wait for. Pure (no Faust): the
engine gives it a ``lag`` function and a clock, and acks only what it releases and handled.

Records come a fetch at a time (:mod:`app.inputs.inbox`): :meth:`EventTimeMerge.offer_batch` queues a
partition's whole batch with the high water its fetch saw, so whether an input lags is known
from its last batch (one comparison), and ``lag`` is asked only about an input that has
delivered nothing since the last reset.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: lag(topic, partition, next_offset) -> True when the broker is known to hold records of that
#: topic partition at or after next_offset (None: nothing delivered since the last reset)
Lag = Callable[[str, int, "int | None"], bool]


@dataclass(slots=True)
class _Partition:
    queues: dict[str, deque[tuple[int, int, Any]]]  # topic -> (event_time, offset, item)
    next_offset: dict[str, int] = field(default_factory=dict)
    highwater: dict[str, int] = field(default_factory=dict)  # topic -> at its last batch
    waiting_since: float | None = None
    waiting_for: tuple[str, ...] = ()  # the lagging inputs the wait is for

    def size(self) -> int:
        return sum(len(q) for q in self.queues.values())


class EventTimeMerge:
    """Per partition, releases queued records of several inputs in event-time order."""

    def __init__(
        self,
        topics: Sequence[str],
        lag: Lag,
        *,
        max_idle_s: float = 2.0,
        max_buffered: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        enabled: bool = True,
    ) -> None:
        self.topics = tuple(topics)
        self.rank = {t: i for i, t in enumerate(self.topics)}
        self.lag = lag
        self.max_idle_s = max_idle_s
        self.max_buffered = max_buffered
        self.clock = clock
        self.enabled = enabled
        self.partitions: dict[int, _Partition] = {}
        #: records released because the wait for another input timed out or the buffer was full
        self.forced = 0

    def _part(self, partition: int) -> _Partition:
        p = self.partitions.get(partition)
        if p is None:
            p = self.partitions[partition] = _Partition({t: deque() for t in self.topics})
        return p

    def offer(
        self, topic: str, partition: int, offset: int, event_time: int, item: Any
    ) -> list[Any]:
        """Queue one delivered record; return the items (of this partition) that may go now,
        in the order to handle them. A record without a valid event time passes ``-1``."""
        if not self.enabled:
            return [item]
        p = self._part(partition)
        p.queues[topic].append((event_time, offset, item))
        p.next_offset[topic] = offset + 1
        return self._release(partition, p)

    def offer_batch(
        self,
        topic: str,
        partition: int,
        entries: Sequence[tuple[int, int, Any]],
        highwater: int | None,
    ) -> None:
        """Queue a partition's batch of one input, ``(event_time, offset, item)`` in offset
        order (``-1`` for a record without a valid event time), fetched when the partition's
        high water was ``highwater``. Nothing is released: call :meth:`release`."""
        if not entries:
            return
        p = self._part(partition)
        p.queues[topic].extend(entries)
        p.next_offset[topic] = entries[-1][1] + 1
        if highwater is not None:
            p.highwater[topic] = highwater

    def release(self, partition: int, limit: int | None = None) -> list[Any]:
        """The items of ``partition`` that may go now, in the order to handle them (at most
        ``limit``: the rest stays queued, in order, and may go at the next call)."""
        p = self.partitions.get(partition)
        if p is None:
            return []
        if not self.enabled:
            out: list[Any] = []
            for q in p.queues.values():
                while q and (limit is None or len(out) < limit):
                    out.append(q.popleft()[2])
            return out
        return self._release(partition, p, limit)

    def poll(self) -> list[Any]:
        """Items whose wait has timed out (call now and then: the engine does on each tick)."""
        out: list[Any] = []
        for partition, p in self.partitions.items():
            if p.waiting_since is not None:
                out += self._release(partition, p)
        return out

    def waiting(self, partition: int | None = None) -> int:
        """Records queued (of one partition, or of all)."""
        parts = (
            self.partitions.values()
            if partition is None
            else [self.partitions[partition]]
            if partition in self.partitions
            else []
        )
        return sum(p.size() for p in parts)

    def waiting_partitions(self) -> list[int]:
        return [n for n, p in self.partitions.items() if p.waiting_since is not None]

    def reset(self) -> list[Any]:
        """Forget everything queued (a rebalance: unacked records are delivered again); returns
        the items it held, so that the engine can stop tracking them."""
        held = [
            item for p in self.partitions.values() for q in p.queues.values() for _, _, item in q
        ]
        self.partitions.clear()
        return held

    def _lags(self, topic: str, partition: int, p: _Partition) -> bool:
        highwater = p.highwater.get(topic)
        if highwater is not None:
            return highwater > p.next_offset[topic]
        return self.lag(topic, partition, p.next_offset.get(topic))

    def next_wait_s(self) -> float | None:
        """Seconds until the first wait times out (None: nothing waits)."""
        since = [p.waiting_since for p in self.partitions.values() if p.waiting_since is not None]
        if not since:
            return None
        return max(0.0, min(since) + self.max_idle_s - self.clock())

    def _must_wait(self, partition: int, p: _Partition) -> bool:
        lagging = tuple(t for t in self.topics if not p.queues[t] and self._lags(t, partition, p))
        if not lagging:
            p.waiting_since, p.waiting_for = None, ()
            return False
        now = self.clock()
        if p.waiting_since is None or p.waiting_for != lagging:
            p.waiting_since, p.waiting_for = now, lagging
        if now - p.waiting_since >= self.max_idle_s:
            self.forced += 1
            return False  # keep waiting_since: until that input delivers, the rest flows
        return True

    def full(self, partition: int) -> tuple[str, ...]:
        """The inputs of ``partition`` with records queued while it holds ``max_buffered``
        or more (fetch no more of them until it drains; () when it is not full)."""
        p = self.partitions.get(partition)
        if p is None or p.size() < self.max_buffered:
            return ()
        return tuple(t for t in self.topics if p.queues[t])

    def _release(self, partition: int, p: _Partition, limit: int | None = None) -> list[Any]:
        out: list[Any] = []
        queues = [p.queues[t] for t in self.topics]  # rank order: ties go to the first
        n = len(queues)
        while limit is None or len(out) < limit:
            heads = [q for q in queues if q]
            if not heads:
                break
            if len(heads) < n:
                if self._must_wait(partition, p):
                    break
            elif p.waiting_since is not None:  # every input has a record: nothing to wait for
                p.waiting_since, p.waiting_for = None, ()
            best = heads[0]
            for q in heads[1:]:
                if q[0][0] < best[0][0]:
                    best = q
            out.append(best.popleft()[2])
        return out

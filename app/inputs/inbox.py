"""The hand-over from the fetch loop to an agent: each input partition's fetched records as ONE
batch, with back pressure per partition.

Why batches: Faust hands an agent one record at a time (a message object, the conductor's
callback and lock, an event, a queue put, a stream iteration and its ``sleep(0)``, sensors),
~100 µs of Python per record before the join sees it. Quix Streams and Kafka Streams hand a
task whatever the fetch returned and order it there (docs/contributing/performance-log.md).
Here the fetch loop (:mod:`app.compat.consumer`) puts each partition's records of one fetch
into the inbox of every agent that reads that topic (the same batch, read only), as they came
from aiokafka, with the partition's high water at that fetch (what flow control needs to know
whether an input lags); the agent's loop (:mod:`app.loop.durable`) takes every batch waiting
at once.

Back pressure: past :attr:`Inbox.max_records` records waiting for one partition, the fetch
loop stops fetching that partition (Faust's own "buffer full" state) until the agent has taken
them — for every agent that reads it, until each has; memory stays bounded under any backlog
(aiokafka keeps at most one fetch per partition).

A rebalance drops what waits (:meth:`Inbox.clear`): those records were not handled, so not
acked, and are read again from the committed offsets.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Batch", "Inbox"]


@dataclass(slots=True)
class Batch:
    """One input partition's records of one fetch, in offset order."""

    topic: str
    partition: int
    records: Sequence[Any]  # aiokafka ConsumerRecords (topic, partition, offset, key, value ...)
    highwater: int | None  # the partition's high water at the fetch (None: unknown)
    generation: int  # the consumer group generation it was fetched in
    #: when it reached the worker (``time.monotonic()``): what an answer's latency counts from
    arrived: float = field(default_factory=time.monotonic)

    @property
    def first(self) -> int:
        return self.records[0].offset

    @property
    def end(self) -> int:
        """One past the last offset."""
        return self.records[-1].offset + 1


class Inbox:
    """Batches waiting for one agent's loop; a partition over its bound is paused."""

    #: records waiting for one partition past which the fetch loop stops fetching it
    max_records = 20_000

    def __init__(self, name: str, topics: Sequence[str]) -> None:
        self.name = name
        self.topics = tuple(topics)
        self._batches: deque[Batch] = deque()
        self._waiting: dict[tuple[str, int], int] = {}  # (topic, partition) -> records waiting
        self._event: asyncio.Event | None = None
        #: (topic, partition) -> called when it drains below the bound (the fetch loop resumes it)
        self.on_drained: Callable[[str, int], None] | None = None
        self._paused: set[tuple[str, int]] = set()

    def _wake(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    # --- the fetch loop's side -------------------------------------------------------------
    def put(self, batch: Batch) -> bool:
        """Queue one batch; True when its partition is now over the bound (pause it)."""
        self._batches.append(batch)
        tp = (batch.topic, batch.partition)
        n = self._waiting.get(tp, 0) + len(batch.records)
        self._waiting[tp] = n
        self._wake().set()
        if n >= self.max_records:
            self._paused.add(tp)
            return True
        return False

    # --- the agent's side ------------------------------------------------------------------
    async def take(
        self, timeout: float | None = None, max_records: int | None = None
    ) -> list[Batch]:
        """The batches waiting (at least one, unless ``timeout`` seconds pass: then []), in
        the order they came, up to ``max_records`` records (at least one batch)."""
        event = self._wake()
        if not self._batches:
            event.clear()
            if timeout is None:
                await event.wait()
            else:
                try:
                    await asyncio.wait_for(event.wait(), timeout)
                except TimeoutError:
                    return []
        return self.take_nowait(max_records)

    def take_nowait(self, max_records: int | None = None) -> list[Batch]:
        out: list[Batch] = []
        taken = 0
        batches, waiting = self._batches, self._waiting
        while batches and (max_records is None or not out or taken < max_records):
            b = batches.popleft()
            out.append(b)
            taken += len(b.records)
            tp = (b.topic, b.partition)
            left = waiting[tp] - len(b.records)
            if left:
                waiting[tp] = left
            else:
                del waiting[tp]
            if tp in self._paused and left < self.max_records:
                self._paused.discard(tp)
                if self.on_drained is not None:
                    self.on_drained(*tp)
        return out

    def clear(self) -> int:
        """Drop every batch waiting (a rebalance: they are read again); how many records."""
        n = sum(len(b.records) for b in self._batches)
        self._batches.clear()
        self._waiting.clear()
        self._paused.clear()  # the rebalance resumes every partition it assigns
        return n

    def waiting(self) -> int:
        """Records waiting."""
        return sum(self._waiting.values())

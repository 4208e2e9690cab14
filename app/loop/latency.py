"""How long a loop's input records wait for their answers: from a batch's arrival at the worker
to the broker taking everything its records made (``etj_answer_latency_seconds``).

Why per batch, not per record: a record's arrival is its fetch's (:class:`app.inputs.inbox.Batch`
keeps the time), and a partition's records are handled and acknowledged in offset order as
ranges (:class:`app.loop.types.Unit`'s ``acks``), so the records of one acknowledged range that
came in one batch all waited the same time: one histogram observation counts them together
(:class:`app.metrics.WeightedHistogram`), a few per batch instead of a call per record. A record
that flow control held for the other input is counted from its own batch's arrival, so the wait
it caused shows.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

from app import metrics
from app.inputs.inbox import Batch

__all__ = ["ArrivalTimes"]


class ArrivalTimes:
    """Per input partition, the offset ranges of the batches a loop took, with their arrival."""

    def __init__(self, join: str, ticks: str | None) -> None:
        self._labels = (join,)
        self._ticks = ticks
        #: (topic, partition) -> (first offset, end offset, arrival) of each batch, oldest first
        self._batches: dict[tuple[str, int], deque[tuple[int, int, float]]] = {}

    def took(self, batches: Sequence[Batch]) -> None:
        """The loop took ``batches`` from its inbox (ticks are not inputs: never timed)."""
        for b in batches:
            if b.topic != self._ticks and b.records:
                tp = (b.topic, b.partition)
                queue = self._batches.get(tp)
                if queue is None:
                    queue = self._batches[tp] = deque()
                queue.append((b.first, b.end, b.arrived))

    def answered(self, acks: dict[tuple[str, int], list[int]], now: float | None = None) -> None:
        """The broker has everything the records of ``acks`` ((topic, partition) -> [first,
        end) handled) made: observe each record's wait, a batch's records at once."""
        now = time.monotonic() if now is None else now
        observe = metrics.answer_latency.observe
        for tp, (first, end) in acks.items():
            queue = self._batches.get(tp)
            while queue:
                b_first, b_end, arrived = queue[0]
                n = min(end, b_end) - max(first, b_first)
                if n > 0:
                    observe(self._labels, now - arrived, n)
                if b_end > end:  # the batch's rest is still waiting (held by flow control)
                    break
                queue.popleft()

    def clear(self) -> None:
        """A rebalance: what the loop took is read again from the committed offsets."""
        self._batches.clear()

"""What a loop knows it delivered.

:class:`AckedRuns`: which input records this process acked, so that the broker surely has
their outputs (a record is acked only after the broker took its outputs or its dead letter,
:mod:`app.loop.dead_letters`). The join state asks it whether a superseded revision may be
dropped (:meth:`app.agents.event_join.JoinEngine.delivered`).
"""

from __future__ import annotations

__all__ = ["AckedRuns"]


class AckedRuns:
    """Per input partition, the run ``[first, end)`` of offsets this process acked.

    One run per partition, not a set: a partition's records are handled in offset order, so a
    batch's acked range extends the run, and a jump (a log gap, a record read past) starts a
    new one, forgetting the old (safe: forgotten means "not known", the revision is kept). A
    record handled again (a seek back, a re-delivery) cuts the run at its offset, since a tick,
    or an event released from flow control, may make a revision this time that it did not make
    before; a rebalance forgets every run (another worker may have handled these partitions).
    Per process: a restarted worker knows only the committed offsets.

    Why not the committed offset alone: a join revised by many records between two commits
    would keep every revision it superseded (:attr:`app.logic.event_join.Join.unsent`): the CI
    run of 2026-11-25 grew one row past the producer's 1 MB request limit."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, int], list[int]] = {}

    def handled(self, topic: str, partition: int, offset: int) -> None:
        """Records from ``offset`` on are being handled: if acked already, what they make now
        is not in the log yet."""
        run = self._runs.get((topic, partition))
        if run is not None and run[0] <= offset < run[1]:
            run[1] = offset

    def acked(self, topic: str, partition: int, first: int, end: int) -> None:
        """The broker has the outputs of records ``first`` .. ``end - 1``."""
        run = self._runs.get((topic, partition))
        if run is None or first > run[1]:  # a jump: only what follows is known
            self._runs[(topic, partition)] = [first, end]
        elif end > run[1]:
            run[1] = end

    def holds(self, topic: str, partition: int, offset: int) -> bool:
        """Are the outputs of input record ``topic[partition]@offset`` surely in the log?"""
        run = self._runs.get((topic, partition))
        return run is not None and run[0] <= offset < run[1]

    def end(self, topic: str, partition: int) -> int | None:
        """The end of the run of ``topic[partition]`` (one past its last offset), or None."""
        run = self._runs.get((topic, partition))
        return None if run is None else run[1]

    def clear(self) -> None:
        self._runs.clear()

"""What a loop knows it delivered, and what becomes of an output the broker refuses for good.

:class:`AckedRuns`: which input records this process acked, so that the broker surely has
their outputs (a record is acked only after the broker took its outputs or its dead letter).
The join state asks it whether a superseded revision may be dropped
(:meth:`app.agents.event_join.JoinEngine.delivered`).

:func:`dead_letter_refused`: poison pills. An output the broker refuses for a reason that will
not change (over the producer's max request size, a topic's ``max.message.bytes``, an invalid
record) would fail the worker on every restart. Each refused output is sent alone first (the
refusal may be a neighbour's in the same producer batch); the input record whose output is
refused again goes to the dead letters, once, naming the output, and the broker has the dead
letter before the record is acked. A refused dead letter fails stop: there is nowhere else to
put the record.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from app import metrics
from app.loop.types import Out, Source
from app.outputs import delivery, sinks

log = logging.getLogger(__name__)

__all__ = ["AckedRuns", "dead_letter", "dead_letter_refused"]


#: (join, input topic) -> its dead-letter counter
_DEAD_LETTERS: dict[tuple[str, str], Any] = {}


def dead_letter(
    join: str,
    dead_letters: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    error: str,
) -> Out:
    """The dead letter of an input record that cannot be joined (counted once, per join)."""
    counter = _DEAD_LETTERS.get((join, topic))
    if counter is None:  # prometheus' labels() costs ~3 µs: once per (join, topic)
        counter = _DEAD_LETTERS[(join, topic)] = metrics.dead_letters.labels(join, topic)
    counter.inc()
    return Out(dead_letters, key, sinks.dead_letter(topic, partition, offset, key, value, error))


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

    def clear(self) -> None:
        self._runs.clear()


async def dead_letter_refused(
    app: Any,
    join: str,
    dead_letters: str,
    refused: list[tuple[int, BaseException]],
    outs: Sequence[Out],
    sources: Sequence[Source],
    ends: Sequence[int],
) -> None:
    """Outputs refused for good (index into ``outs``, error): each sent alone again; the
    records whose outputs are refused again go to the dead letters (module docstring).
    ``ends[i]``: len(outs) after ``sources[i]`` was handled."""
    letters = []
    dead: set[int] = set()  # indices into sources
    for i, exc in refused:
        out = outs[i]
        if out.topic == dead_letters:
            delivery.fail_stop(f"a dead letter was refused by the broker: {exc!r}")
        source = bisect_right(ends, i)  # the record whose outputs hold outs[i]
        if source in dead:
            continue
        if out.again:  # its own record was dead-lettered when it was first refused
            log.warning(
                "join %s: the broker refused a re-emitted output again (%r): output to "
                "%s, key %s; not sent",
                join,
                exc,
                out.topic,
                _text(out.key),
            )
            continue
        try:
            await (await delivery.send_alone(app, out.topic, out.key, out.value))
            continue  # delivered alone: the refusal was a batch neighbour's
        except Exception as again:
            if not delivery.refused_for_good(again):  # send_alone failed stop already
                raise
            exc = again
        dead.add(source)
        src = sources[source]
        log.warning(
            "join %s: the broker refused an output of %s[%s]@%s for good (%r); the "
            "record goes to the dead letters",
            join,
            src.topic,
            src.partition,
            src.offset,
            exc,
        )
        letter = dead_letter(
            join,
            dead_letters,
            src.topic,
            src.partition,
            src.offset,
            src.key,
            src.value,
            f"output refused by the broker: {exc!r} (output to "
            f"{out.topic}, key {_text(out.key)}, {len(out.value)} bytes)",
        )
        letters.append(await delivery.send_direct(app, dead_letters, letter.key, letter.value))
    for fut in letters:
        await fut  # a failure here failed stop already (send_direct's callback)


def _text(key: bytes | None) -> str:
    """An output key for a person: its text, cut at 200 characters."""
    return "null" if key is None else repr(key[:200].decode("utf-8", errors="replace"))

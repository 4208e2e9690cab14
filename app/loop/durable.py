"""The one durability protocol every agent runs, a fetch at a time: take every batch waiting ->
order by event time -> handle -> changelog durable -> outputs durable -> ack the offsets.

Per turn of :meth:`DurableLoop.run`:

1. take every batch the fetch loop left in the loop's inbox (:mod:`app.inputs.inbox`): one per input
   partition per fetch; a batch of an older group generation is dropped (the rebalance seeks its
   partition back to the committed offset) — :mod:`app.loop.intake`;
2. parse each record (:func:`app.inputs.parsers.compile_parser`; a record that does not parse goes to
   the dead letters with its reason) and queue it in flow control (:mod:`app.inputs.flow_control`),
   which releases a partition's records of several inputs in event-time order — a whole batch
   at once, its lag known from the batch's high water — :mod:`app.loop.intake`;
3. handle what is released, record by record, through the engine's rules; state is read and
   written in the batch's overlays (:mod:`app.state.overlay`), outputs are collected. A bug on one
   record dead-letters that record (``internal error``), never kills the worker — here,
   :meth:`DurableLoop.handle`;
4. flush the overlays: each changed row encoded once, written to the store, and handed to the
   producer as one changelog row per key (:mod:`app.outputs.producer_batches`) — :mod:`app.loop.pipeline`;
5. hand the batch to the delivery: it waits until the broker has the changelog rows (state
   first: no output outruns its changelog), sends the outputs, and once the broker has them,
   acks each input partition's handled range (:meth:`app.compat.consumer.EtjConsumer.ack_range`);
   the commit takes the end of the acked range (of a topic several loops read: the least of
   their ends), so no offset is committed past a record whose outputs are not durable. The loop handles the next batch meanwhile (at most
   :attr:`app.loop.pipeline.DeliveryPipeline.max_in_flight` in flight) —
   :mod:`app.loop.pipeline`.

A crash between the changelog and the outputs leaves outputs in state that never reached their
topic; the record was not acked, so it comes again and the engine re-emits what it touched
(:mod:`app.joins.state`). Poison pills (an output refused for good) dead-letter their input
record (:mod:`app.loop.acks`); changelog rows and every transient error fail stop
(:mod:`app.outputs.delivery`).

A rebalance and a stop wait for the batches in flight and nothing else (``EtjApp``): what waits
in the inbox or in flow control is dropped unacked and read again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from app.faust_app import app
from app.inputs.inbox import Batch
from app.loop import awaiting
from app.loop.acks import AckedRuns
from app.loop.dead_letters import dead_letter, handling
from app.loop.intake import Intake
from app.loop.latency import ArrivalTimes
from app.loop.pipeline import DEAD_LETTERS, DeliveryPipeline
from app.loop.types import Engine, Hop, Unit

if TYPE_CHECKING:
    from app.compat.consumer import EtjConsumer

__all__ = ["DurableLoop", "agent_body", "loops"]

log = logging.getLogger(__name__)

#: every loop of this worker (tests wait until each has delivered what it handled)
loops: list[DurableLoop] = []


class DurableLoop:
    """One agent's loop (module docstring): its intake (:mod:`app.loop.intake`), the
    handling, its delivery (:mod:`app.loop.pipeline`)."""

    def __init__(
        self,
        engine: Engine,
        topics: Sequence[str],
        merged: Sequence[str] = (),
        ticks: str | None = None,
        hop: bool = False,
    ) -> None:
        """``topics``: every input; ``merged``: those flow control orders by event time (ties:
        the first); ``ticks``: the agent's ticks topic (None: none); ``hop``: the engine
        passes records on, keyed otherwise (:class:`~app.loop.types.Hop`): they skip the door
        (:mod:`app.inputs.admission`: the loop they are passed to judges them) and it is
        handed each whole record (its timestamp and headers go with it)."""
        self.engine = engine
        self.join = engine.join
        self.ticks = ticks
        self.hop = hop
        #: the engine again when ``hop``: one that passes records on (else None)
        self.passer: Hop | None = cast(Hop, engine) if hop else None
        self.intake = Intake(engine, topics, merged, ticks, door=not hop)
        #: the intake's (what the stall guard and the tests read of a loop)
        self.inbox, self.merge = self.intake.inbox, self.intake.merge
        self.acked = AckedRuns()
        #: the input records this loop handled since the last rebalance (their outputs are in
        #: the log or on their way: a failed send fails stop)
        self.handled = AckedRuns()
        #: when each batch arrived, to time its records' answers (not a hop's: it answers
        #: nothing, the join it feeds does)
        self.arrivals = None if hop else ArrivalTimes(engine.join, ticks)
        self.pipeline = DeliveryPipeline(engine, self.acked, self.arrivals, self.inbox.name)
        loops.append(self)
        app.loops.append(self)

    @property
    def in_flight(self) -> int:
        """The pipeline's (what the stall guard and the tests read of a loop)."""
        return self.pipeline.in_flight

    async def run(self) -> None:
        """The agent's body: batches in, durable outputs out, offsets acked (module doc)."""
        intake, pipeline = self.intake, self.pipeline
        idle, arrivals = pipeline.idle, self.arrivals
        # the app's transport makes etj's consumer (app.compat.consumer); every loop's inbox,
        # not only this one's: a topic several loops read is handed to all of them from its
        # first batch on, whichever agent starts first (again: nothing changes)
        consumer = cast("EtjConsumer", app.consumer)
        for reader in app.loops:
            consumer.route(reader.intake.inbox)
        deliver = pipeline.start()
        try:
            while True:
                idle.set()
                batches = await intake.take()
                idle.clear()
                if arrivals is not None:
                    arrivals.took(batches)
                unit = self.handle(batches)
                if unit is not None:
                    await pipeline.hand_over(unit)
                if deliver.done():  # it only ends by raising: that is the agent's error
                    deliver.result()
                # one loop turn for everything else, every batch: with batches waiting, this
                # loop would otherwise run batch after batch without giving the fetch loop a
                # turn, and a partition flow control holds for its lagging input would wait
                # out ETJ_FLOW_MAX_IDLE_MS for a fetch already on its way (a backlog of
                # 100,000 records: 7,855 records let go early, 11,630 late)
                await asyncio.sleep(0)
        finally:
            idle.set()
            if not deliver.done():
                deliver.cancel()

    def handle(self, batches: Sequence[Batch]) -> Unit | None:
        """Parse ``batches`` into flow control, then handle what it lets go in event-time
        order (:meth:`app.loop.intake.Intake.release`); the unit to deliver, or None when
        nothing was handled."""
        generation = app.consumer_generation_id
        unit = Unit(generation)
        released, ticks = self.intake.release(batches, generation)
        for item in released:
            self._handle_one(unit, *item)
        for b in ticks:
            for record in b.records:
                self._handle_one(unit, b.topic, record, None)
        if not unit.sources:
            return None
        for (topic, partition), (first, _end) in unit.acks.items():
            self.acked.handled(topic, partition, first)
        return unit

    def _handle_one(self, unit: Unit, topic: str, record: Any, parsed: Any) -> None:
        """One record -> its outputs; a bug must not kill the worker nor lose the record."""
        partition, offset = record.partition, record.offset
        handling(record)  # a dead letter made for it keeps its timestamp and headers
        try:
            if topic == self.ticks:
                outs = self.engine.on_tick(partition, offset)
            elif (passer := self.passer) is not None:
                outs = passer.pass_on(topic, record, parsed)
            else:
                outs = self.engine.on_record(
                    topic, partition, offset, record.key, record.value, parsed
                )
        except Exception as exc:
            log.exception("join %s failed on %s[%s]@%s", self.join, topic, partition, offset)
            outs = [
                dead_letter(
                    self.join,
                    DEAD_LETTERS,
                    topic,
                    partition,
                    offset,
                    record.key,
                    record.value,
                    f"internal error: {exc!r}",
                    record,
                )
            ]
        unit.outs += outs
        unit.sources.append(record)  # its Source: the consumer record (topic == record.topic)
        unit.ends.append(len(unit.outs))
        span = unit.acks.get((topic, partition))
        if span is None:
            unit.acks[(topic, partition)] = [offset, offset + 1]
        else:
            span[1] = offset + 1
        self.handled.acked(topic, partition, offset, offset + 1)

    # --- rebalance, stop -------------------------------------------------------------------
    def drop_waiting(self) -> int:
        """A rebalance or a stop: let go of what waits in the inbox and in flow control (not
        acked: read again from the committed offsets); how many records."""
        dropped = self.intake.drop()
        self.acked.clear()  # another worker may handle these partitions next
        self.handled.clear()
        if self.arrivals is not None:
            self.arrivals.clear()
        return dropped

    def settled(self) -> bool:
        """Was everything this loop handled delivered? (app.state.crash_marker keeps the local state
        only then)"""
        return self.pipeline.in_flight == 0 and not any(ov.pending for ov in self.engine.overlays)

    # --- diagnostics -----------------------------------------------------------------------
    def describe(self) -> str:
        """This loop's state and where each of its tasks waits (logged when a partition stalls
        or a rebalance waits long)."""
        merge, pipeline = self.intake.merge, self.pipeline
        queue = pipeline.queue
        held = {n: p.waiting_for for n, p in merge.partitions.items() if p.size()}
        lines = [
            f"join {self.join}: inbox {self.intake.inbox.waiting()} records, batches in flight "
            f"{pipeline.in_flight} (pipeline {'?' if queue is None else queue.qsize()}/"
            f"{pipeline.max_in_flight}), flow control holds {merge.waiting()} (partition -> "
            f"lagging inputs waited for: {held})"
        ]
        for name, task in pipeline.tasks.items():
            lines.append(f"  {name}: " + " -> ".join(awaiting.chain(task)))
        return "\n".join(lines)


def agent_body(loop: DurableLoop) -> Callable[[Any], Any]:
    """The Faust agent of a loop: it never iterates its stream (the consumer hands its loop
    batches, :mod:`app.compat.consumer`), but it is an agent all the same: started, supervised
    and stopped by Faust, listed by ``faust agents`` and the web views."""

    async def body(stream: Any) -> None:
        await loop.run()

    return body

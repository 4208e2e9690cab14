"""A loop's way out (steps 4 and 5 of :mod:`app.loop.durable`): a handled batch's changed rows
to the store and the producer, then, batch by batch and in order, changelog durable -> outputs
sent -> outputs durable -> each input partition's handled range acked.

Two tasks beside the loop: ``deliver`` waits for a batch's changelog rows and sends its outputs,
``ack`` waits for the outputs and acks; each hands on through a queue of at most
:attr:`DeliveryPipeline.max_in_flight` batches, so the loop handles the next batch while the
broker takes the last one, and waits when the broker falls that far behind.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, cast

from faust.types import TP

from app.faust_app import app, settings
from app.loop.acks import AckedRuns
from app.loop.dead_letters import dead_letter_refused
from app.outputs.producer_batches import send_records
from app.state.store_io import StoreIO

if TYPE_CHECKING:
    from app.compat.consumer import EtjConsumer
    from app.loop.latency import ArrivalTimes
    from app.loop.types import Engine, Unit
    from app.state.overlay import MemoryIO

DEAD_LETTERS = settings.dead_letter_topic


class DeliveryPipeline:
    """One loop's delivery (module docstring)."""

    #: handled batches not yet delivered at most: the loop handles batch k+1 while batch k
    #: waits for the broker
    max_in_flight = 4

    def __init__(
        self,
        engine: Engine,
        acked: AckedRuns,
        arrivals: ArrivalTimes | None = None,
        reader: str | None = None,
    ) -> None:
        """``acked``: where the input records whose outputs the broker has are recorded;
        ``arrivals``: what times their answers (None: not timed); ``reader``: the name its
        acks go to the consumer under (its loop's inbox's; default the join's): a topic read
        by several loops is committed up to what every one of them acked."""
        self.engine = engine
        self.join = engine.join
        self.reader = engine.join if reader is None else reader
        self.acked = acked
        self.arrivals = arrivals
        self.in_flight = 0  # batches handed over, not yet delivered (tests wait for 0)
        #: clear while the loop handles a batch and hands it over
        #: (:meth:`app.loop.durable.DurableLoop.run`)
        self.idle = asyncio.Event()
        self.idle.set()
        self._stores: dict[str, StoreIO | MemoryIO] = {
            ov.io.changelog: ov.io for ov in engine.overlays
        }
        self.queue: asyncio.Queue | None = None
        #: the loop's task and the delivery's, by name (where each waits: ``describe``)
        self.tasks: dict[str, Any] = {}

    def start(self) -> Any:
        """The delivery's tasks (the changelog -> outputs -> acks pipeline); its task."""
        self.in_flight = 0
        self.queue = asyncio.Queue(maxsize=self.max_in_flight)
        deliver = asyncio.ensure_future(self._deliver(self.queue))
        self.tasks = {"loop": asyncio.current_task(), "deliver": deliver}
        return deliver

    def stop(self) -> None:
        for task in self.tasks.values():
            if task is not None and task is not asyncio.current_task() and not task.done():
                task.cancel()
        self.queue = None
        self.tasks = {}

    async def hand_over(self, unit: Unit) -> None:
        """The batch's changed rows to the store and, as changelog rows, to the producer;
        then the batch to :meth:`_deliver`."""
        assert self.queue is not None
        self.in_flight += 1
        self.engine.end_batch()
        rows = [row for ov in self.engine.overlays for row in ov.flush()]
        unit.changelog = await send_records(app, rows, on_sent=self._persist)
        await self.queue.put(unit)

    def _persist(self, topic: str, partition: int, count: int, fut: Any) -> None:
        io = self._stores.get(topic)
        if io is None:
            return

        def done(f: Any) -> None:
            if not f.cancelled() and f.exception() is None and f.result() is not None:
                io.persist_offset(partition, f.result().offset + count - 1)

        fut.add_done_callback(done)

    async def _deliver(self, pipeline: asyncio.Queue) -> None:
        """Batch by batch, in order: changelog durable -> outputs sent -> (acks)."""
        acks: asyncio.Queue = asyncio.Queue(maxsize=self.max_in_flight)
        acking = self.tasks["ack"] = asyncio.ensure_future(self._ack(acks))
        try:
            while True:
                unit = await pipeline.get()
                if unit.changelog is not None:
                    await unit.changelog.wait()  # a failure failed stop already
                unit.sent = await send_records(
                    app,
                    [
                        (o.topic, None, o.key, o.value)
                        if o.timestamp is None and o.headers is None
                        else (o.topic, None, o.key, o.value, o.timestamp, o.headers)
                        for o in unit.outs
                    ],
                    refusable=True,
                )
                await acks.put(unit)
                if acking.done():  # it only ends by raising
                    acking.result()
        finally:
            if not acking.done():
                acking.cancel()

    async def wait_delivered(self, timeout: float | None = None) -> bool:
        """Until every batch handed over is delivered (and the loop waits for input); False
        if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.in_flight or not self.idle.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def _ack(self, acks: asyncio.Queue) -> None:
        """Batch by batch, in order: the broker has its outputs (refused ones dead-lettered):
        ack each input partition's handled range."""
        consumer = cast("EtjConsumer", app.consumer)  # the app's transport makes etj's
        reader = self.reader
        while True:
            unit = await acks.get()
            assert unit.sent is not None
            refused = await unit.sent.wait()
            if refused:
                await dead_letter_refused(
                    app, self.join, DEAD_LETTERS, refused, unit.outs, unit.sources, unit.ends
                )
            if unit.generation == app.consumer_generation_id:
                for (topic, partition), (first, end) in unit.acks.items():
                    consumer.ack_range(TP(topic, partition), first, end, reader)
                    self.acked.acked(topic, partition, first, end)
                if self.arrivals is not None:
                    self.arrivals.answered(unit.acks)
            self.in_flight -= 1

"""The one durability protocol every agent runs: handle records one by one, make them durable
in batches (flush the changelog -> send the outputs -> ack), in event-time order across its
co-partitioned inputs.

Per batch of records already waiting in the agent's queue (up to :attr:`DurableLoop.max_batch`):
each record is handled (validate, update tables, compute outputs), then the batch's changelog
rows go to the producer — one per key written, its last value (:mod:`app.compat.write_behind`:
a key rewritten by many records of the batch, e.g. the stream clock, costs one send) — then ONE
producer flush makes them durable, then its outputs are sent, then its records are acked.
Idle, a batch is one record; under a backlog one flush serves hundreds. Outputs reach the
broker before the offsets that produced them are committed: a record is acked only once the
broker has its outputs (and Faust's commit flushes the producer before it commits offsets,
``Consumer._commit_offsets``). State first: a crash between the flush and the sends
leaves outputs in state that never reached their topic; the handlers re-emit them when the
record is delivered again (it was not acked, so its offset was not committed).

Poison pills (:mod:`app.compat.delivery`): an output the broker refuses for good (e.g. over the
producer's max request size) would fail-stop the worker on every restart. Instead, the loop
confirms the refusal by sending that output alone, then dead-letters the record that produced
it (``output refused by the broker: ...``, naming the output), waits until the broker has the
dead letter, and acks. A tick is dead-lettered the same way for an output it produced (its
revisit, or the re-emit of a partition's state): the dead letter then names the join id whose
revision is missing. Changelog rows, a refused dead letter and every transient error still
fail-stop.

Flow control (:mod:`app.flow_control`): records of an agent's joined inputs pass an
:class:`~app.flow_control.EventTimeMerge` first, so under a backlog a partition's inputs are
handled in event-time order (live, nothing waits). A record it holds back is not acked; a
rebalance drops what it holds (they are delivered again). A held record whose wait times out
with nothing else arriving is let go by a wake-up tick the loop sends to its own ticks topic.

A record flow control lets go later is handled as Faust's current event
(:mod:`app.compat.current_event`): Faust's tables take a row's partition (RocksDB database,
changelog partition) from it, and a tick of one partition lets go of held records of others.

A rebalance must not wait for a held record: Faust waits, before it gives partitions up, until
every record it delivered is acked or garbage (``Consumer.wait_empty``, a weak set, no time
limit). Dropping a record from the merge does not make it garbage (Faust's stream generator
keeps the last message it delivered in a local), so :meth:`DurableLoop.drop_waiting` also
takes the dropped records out of Faust's set; and :mod:`app.compat.revoke` calls it again and
again while it waits, for records the agent takes and holds meanwhile. Without it a worker
waited minutes on one held mood and the group never settled (the 10-minute chaos run;
tests/agent/test_revoke.py).

Nor for a batch half built: the loop ends a batch when the agent's buffer is empty, but before
it waits, Faust clears that buffer, and the loop then waits for a record that never comes with
its batch handled, not delivered, not acked. So on a rebalance (and a stop) the batch is
handed to the delivery from outside the loop (:meth:`DurableLoop.flush_batch`,
``app.on_revoke_flush``). Found by the second 10-minute chaos run: a worker's revoke waited
for ever on such a batch.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from faust.types import TP, TopicT

from app import awaiting, metrics, sinks
from app.compat import delivery
from app.compat.current_event import as_current
from app.compat.stores import committed_offset
from app.compat.write_behind import WriteBehind
from app.faust_app import app, settings
from app.flow_control import EventTimeMerge
from app.records import InvalidRecord
from app.topology import dead_letters

DEAD_LETTERS = dead_letters.get_topic_name()

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Out:
    """A record to send once state is durable."""

    topic: TopicT
    key: bytes | None
    value: bytes
    #: a repeat of an output made by an earlier record (re-emitted after a crash or a
    #: rebalance): if the broker refuses it, the record that triggered the repeat is not to blame
    again: bool = False


def dead_letter(join: str, topic: str, partition: int, offset: int, key: bytes | None,
                value: bytes | None, error: str) -> Out:
    """The dead letter of an input record that cannot be joined (counted once, per join)."""
    metrics.dead_letters.labels(join, topic).inc()
    return Out(dead_letters, key, sinks.dead_letter(topic, partition, offset, key, value, error))


#: (message, parsed record or None for a tick) -> what to send once state is durable
Handler = Callable[[Any, Any], list[Out]]
#: (topic, key, value) -> (parsed record or InvalidRecord, event time; -1 when invalid)
Parser = Callable[[str, "bytes | None", "bytes | None"], tuple[Any, int]]


#: every loop of this worker (tests wait until each has delivered what it handled)
loops: list["DurableLoop"] = []


class AckedRuns:
    """Which input records this process acked, so the broker surely has their outputs: a
    record is acked only after the broker took its outputs (or its dead letter).

    Kept as one run ``[first, end)`` of consecutive acked offsets per input partition, not a
    set: a partition's records are handled in offset order (flow control keeps each input's
    order), and a jump (a record Faust read past without handing it over, a gap in the log)
    starts a new run, forgetting the old one (safe: forgotten means "not known", the revision
    is kept). A record handled again (a seek back, a re-delivery) cuts the run at its offset,
    since a tick, or an event released from its hold, may make a revision this time that it
    did not make before; and a rebalance forgets every run (:meth:`DurableLoop.drop_waiting`),
    since a partition may come back with revisions another worker made from the same offsets.
    Per process: a restarted worker knows only the committed offsets.

    Why not the committed offset alone (:meth:`app.agents.event_join.JoinEngine.delivered`):
    a join revised by many records between two commits, or while a commit waits at a
    partition's head, then keeps every revision it superseded
    (:attr:`app.logic.event_join.Join.unsent`) — the CI run of 2026-11-25: a consultant's row
    of recent joins passed the producer's 1 MB request limit and the worker failed stop."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, int], list[int]] = {}

    def handled(self, topic: str, partition: int, offset: int) -> None:
        """A record is being handled: if it was acked already, what it makes now is not in
        the log yet."""
        run = self._runs.get((topic, partition))
        if run is not None and run[0] <= offset < run[1]:
            run[1] = offset

    def acked(self, topic: str, partition: int, offset: int) -> None:
        """The broker has this record's outputs."""
        run = self._runs.get((topic, partition))
        if run is None or offset > run[1]:  # a jump: only what follows is known
            self._runs[(topic, partition)] = [offset, offset + 1]
        elif offset == run[1]:
            run[1] += 1

    def holds(self, topic: str, partition: int, offset: int) -> bool:
        """Are the outputs of input record ``topic[partition]@offset`` surely in the log?"""
        run = self._runs.get((topic, partition))
        return run is not None and run[0] <= offset < run[1]

    def clear(self) -> None:
        self._runs.clear()


class DurableLoop:
    """One agent's loop: flow control -> handle -> flush -> send -> ack (module docstring)."""

    #: most records handled between two flushes: bounds what one flush (and a crash) holds
    max_batch = 500

    def __init__(self, join: str, merged: Sequence[str], ticks: TopicT | None,
                 parse: Parser, handle: Handler, tables: Sequence[Any] = ()) -> None:
        """``merged``: the input topics flow control orders by event time (ties: the first);
        ``ticks``: the agent's own ticks topic (wake-ups), None for a single-input agent;
        ``tables``: the tables the handler writes (their changelog rows go once per batch,
        the last value per key: :mod:`app.compat.write_behind`)."""
        self.join = join
        self.writes = WriteBehind(tables)
        self.in_flight = 0  # batches handled, not yet delivered (tests wait for 0)
        self._records_in: dict[str, Any] = {}
        self._flow_waiting = metrics.flow_waiting.labels(join)
        loops.append(self)
        self.ticks = ticks
        self.ticks_name = None if ticks is None else ticks.get_topic_name()
        self.parse = parse
        self.handle_one = handle
        self.merge = EventTimeMerge(tuple(merged), self._lag,
                                    max_idle_s=settings.flow_max_idle_ms / 1000,
                                    max_buffered=settings.flow_max_buffered,
                                    enabled=settings.flow_control and len(merged) > 1)
        self._wakeups: set[int] = set()  # partitions with a wake-up tick scheduled
        #: the input records this loop acked, whose outputs the broker has
        self.acked = AckedRuns()
        app.on_revoke_drop.append(self.drop_waiting)
        app.on_revoke_flush.append(self.flush_batch)
        app.on_describe.append(self.describe)
        app.on_settled.append(self.settled)
        #: the batch handled and not yet handed to the delivery: events, their outputs, and
        #: ends[i] = len(outputs) after events[i] (outputs of events[i]: outs[ends[i-1]:ends[i]])
        self._events: list[Any] = []
        self._outs: list[Out] = []
        self._ends: list[int] = []
        self._pipeline: asyncio.Queue | None = None
        self._flushing: asyncio.Lock | None = None
        self._queue: Any = None  # the agent's buffer of delivered records
        #: the tasks of the running loop: the agent's, the delivery's, the acks' (describe())
        self._tasks: dict[str, Any] = {}

    # --- per record ------------------------------------------------------------------------
    def handle(self, msg: Any, parsed: Any) -> list[Out]:
        """One message -> what to send; a bug must not kill the worker nor lose the record."""
        self.acked.handled(msg.topic, msg.partition, msg.offset)
        try:
            if msg.topic != self.ticks_name:
                counter = self._records_in.get(msg.topic)
                if counter is None:  # prometheus' labels() costs a lock: once per topic
                    counter = self._records_in[msg.topic] = metrics.records_in.labels(
                        self.join, msg.topic)
                counter.inc()
            return self.handle_one(msg, parsed)
        except Exception as exc:
            log.exception("join %s failed on %s[%s]@%s", self.join, msg.topic, msg.partition,
                          msg.offset)
            return [dead_letter(self.join, msg.topic, msg.partition, msg.offset, msg.key,
                                msg.value, f"internal error: {exc!r}")]

    def ready(self, event: Any) -> list[tuple[Any, Any]]:
        """What may be handled now that ``event`` arrived: (event, parsed record) in order.

        Inputs go through flow control; a tick first lets go of records whose wait has timed
        out, then is handled itself."""
        msg = event.message
        forced = self.merge.forced
        if msg.topic == self.ticks_name:
            out = self.merge.poll() + [(event, None)]
        else:
            try:
                parsed, event_time = self.parse(msg.topic, msg.key, msg.value)
            except InvalidRecord as exc:
                parsed, event_time = exc, -1  # goes first, to the dead letters
            out = self.merge.offer(msg.topic, msg.partition, msg.offset, event_time,
                                   (event, parsed))
        if self.merge.forced > forced:
            metrics.flow_forced.labels(self.join).inc(self.merge.forced - forced)
        self._flow_waiting.set(self.merge.waiting())
        return out

    # --- flow control ----------------------------------------------------------------------
    def _lag(self, topic: str, partition: int, next_offset: int | None) -> bool:
        """Does the broker hold records of this input partition not delivered to us yet?

        From the consumer's last fetch (its high watermark); the next offset is the one after
        the last delivered, or the committed one when none was delivered since the assignment.
        Unknown (no fetch yet, not assigned, not started) counts as no: never wait blind."""
        tp = TP(topic, partition)
        consumer = app.consumer
        try:
            highwater = consumer.highwater(tp)
        except Exception:
            return False
        if highwater is None:
            return False
        if next_offset is None:
            next_offset = committed_offset(consumer, tp) or 0
        return highwater > next_offset

    def drop_waiting(self) -> None:
        """A rebalance starts: let go of held records (unacked, so delivered again after it;
        module doc)."""
        self._untrack(self.merge.reset())
        metrics.flow_waiting.labels(self.join).set(0)
        self.acked.clear()  # another worker may handle these partitions next

    def _untrack(self, dropped: list[tuple[Any, Any]]) -> None:
        """Faust stops waiting for these records (not acked: their offsets stay uncommitted)."""
        if dropped:
            first: dict[tuple[str, int], int] = {}
            for event, _ in dropped:
                m = event.message
                tp = (m.topic, m.partition)
                first[tp] = min(first.get(tp, m.offset), m.offset)
            log.info("join %s: a rebalance let go of %d held records (delivered again from "
                     "the committed offsets); first offset per input: %s", self.join,
                     len(dropped), {f"{t}[{p}]": o for (t, p), o in sorted(first.items())})
        unacked = app.consumer._unacked_messages
        for event, _ in dropped:
            unacked.discard(event.message)

    def _wake(self, partition: int) -> None:
        """A wait may have timed out with nothing else arriving: a tick makes the agent look."""
        self._wakeups.discard(partition)
        asyncio.ensure_future(self._send_wake(partition))

    async def _send_wake(self, partition: int) -> None:
        assert self.ticks is not None
        try:
            await self.ticks.send(value=b"{}", partition=partition)
        except Exception as exc:  # the worker stops (producer gone); revisit ticks also poll
            log.info("wake-up tick for partition %s not sent: %r", partition, exc)

    def _schedule_wakeups(self) -> None:
        if self.ticks is None:
            return
        loop = asyncio.get_running_loop()
        for partition in self.merge.waiting_partitions():
            if partition not in self._wakeups:
                self._wakeups.add(partition)
                loop.call_later(self.merge.max_idle_s + 0.05, self._wake, partition)

    # --- the loop --------------------------------------------------------------------------
    #: batches handled but not yet delivered (changelog -> outputs -> acks) at most: the loop
    #: handles batch k+1 while batch k waits for the broker
    max_in_flight = 4

    async def run(self, stream: Any) -> None:
        """Handle every record as it is let go; per batch hand its changelog rows to the
        producer and queue it for :meth:`_deliver` (module doc)."""
        stream.enable_acks = False  # acked by _ack, once the broker has the batch's outputs
        self.in_flight = 0  # a new run: batches of an earlier one that failed are not acked
        queue = self._queue = getattr(stream.channel, "queue", None)
        #: (changelog futures, outputs, events, ends), batch by batch
        self._pipeline = asyncio.Queue(maxsize=self.max_in_flight)
        self._flushing = asyncio.Lock()
        self._events, self._outs, self._ends = [], [], []
        deliver = asyncio.ensure_future(self._deliver(stream, self._pipeline))
        self._tasks = {"loop": asyncio.current_task(), "deliver": deliver}
        generation = None
        try:
            async for event in stream.events():
                if event.message.generation_id != generation:  # a rebalance: held ones come again
                    generation = event.message.generation_id
                    self._untrack(self.merge.reset())
                for ready, parsed in self.ready(event):
                    self._events.append(ready)
                    if ready is event:
                        self._outs += self.handle(ready.message, parsed)
                    else:  # let go by flow control: its partition, not the current one's
                        with as_current(ready):
                            self._outs += self.handle(ready.message, parsed)
                    self._ends.append(len(self._outs))
                if self._events and (len(self._events) >= self.max_batch
                                     or not self._more_waiting(queue)):
                    await self.flush_batch()
                    if deliver.done():  # it only ends by raising: that is the agent's error
                        deliver.result()
                self._schedule_wakeups()
        finally:
            if not deliver.done():
                deliver.cancel()

    @staticmethod
    def _more_waiting(queue: Any) -> bool:
        """Does the agent's buffer hold more delivered records (the batch goes on)?"""
        return queue is not None and not queue.empty()

    async def flush_batch(self) -> None:
        """Hand the batch handled so far to the delivery: its changelog rows to the producer
        (the last value per key), then the batch to :meth:`_deliver`. The loop calls it when
        its buffer is empty; a rebalance or a stop calls it too (module doc). One at a time, in
        order: the batch and the rows it wrote are taken in the same step."""
        if self._flushing is None or self._pipeline is None:
            return  # not running
        async with self._flushing:
            if not self._events:
                return
            events, outs, ends = self._events, self._outs, self._ends
            self._events, self._outs, self._ends = [], [], []
            rows = await self.writes.flush()  # takes the rows before its first await
            self.in_flight += 1
            await self._pipeline.put((rows, outs, events, ends))

    async def _deliver(self, stream: Any, pipeline: asyncio.Queue) -> None:
        """Batch by batch, in order: wait until its changelog rows are in the broker (state
        first: no output outruns its changelog), send its outputs, queue it for :meth:`_ack`
        (the next batch's outputs go out while this one's are awaited)."""
        acks: asyncio.Queue = asyncio.Queue(maxsize=self.max_in_flight)
        acking = self._tasks["ack"] = asyncio.ensure_future(self._ack(stream, acks))
        try:
            while True:
                rows, outs, events, ends = await pipeline.get()
                if rows:
                    await asyncio.gather(*rows)
                sent = [await delivery.send_direct(app, out.topic.get_topic_name(), out.key,
                                                   out.value, refusable=True) for out in outs]
                await acks.put((sent, outs, events, ends))
                if acking.done():  # it only ends by raising
                    acking.result()
        finally:
            if not acking.done():
                acking.cancel()

    async def _ack(self, stream: Any, acks: asyncio.Queue) -> None:
        """Batch by batch, in order: wait until the broker has its outputs; dead-letter the
        records whose outputs it refused for good (:meth:`_dead_letter_refused`); ack."""
        while True:
            sent, outs, events, ends = await acks.get()
            refused: list[tuple[int, BaseException]] = []
            for i, fut in enumerate(sent):
                try:
                    await fut  # at once when done already
                except Exception as exc:
                    if not delivery.refused_for_good(exc):  # the callback failed stop already
                        delivery.fail_stop(f"a produced record was not delivered: {exc!r}")
                        raise
                    refused.append((i, exc))
            if refused:
                await self._dead_letter_refused(refused, outs, events, ends)
            for done in events:
                m = done.message
                self.acked.acked(m.topic, m.partition, m.offset)
                await stream.ack(done)
            self.in_flight -= 1

    async def _dead_letter_refused(self, refused: list[tuple[int, BaseException]],
                                   outs: list[Out], events: list[Any], ends: list[int]) -> None:
        """Outputs refused for good (index, error): each sent alone again (the refusal may be a
        batch neighbour's); the records whose outputs are refused again go to the dead letters,
        once each, and the broker has those dead letters before this returns (a refused dead
        letter fails stop: there is nowhere else to put the record)."""
        letters = []
        dead: set[int] = set()  # indices into events
        for i, exc in refused:
            out = outs[i]
            topic = out.topic.get_topic_name()
            if topic == DEAD_LETTERS:
                delivery.fail_stop(f"a dead letter was refused by the broker: {exc!r}")
            source = bisect_right(ends, i)  # the event whose outputs hold outs[i]
            if source in dead:
                continue
            if out.again:  # its own record was dead-lettered when it was first refused
                log.warning("join %s: the broker refused a re-emitted output again (%r): "
                            "output to %s, key %s; not sent", self.join, exc, topic,
                            _text(out.key))
                continue
            try:
                await (await delivery.send_alone(app, topic, out.key, out.value))
                continue  # delivered alone: the refusal was a batch neighbour's
            except Exception as again:
                if not delivery.refused_for_good(again):  # send_alone failed stop already
                    raise
                exc = again
            dead.add(source)
            msg = events[source].message
            log.warning("join %s: the broker refused an output of %s[%s]@%s for good (%r); "
                        "the record goes to the dead letters", self.join, msg.topic,
                        msg.partition, msg.offset, exc)
            letter = dead_letter(
                self.join, msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                f"output refused by the broker: {exc!r} (output to {topic}, key "
                f"{_text(out.key)}, {len(out.value)} bytes)")
            letters.append(await delivery.send_direct(app, DEAD_LETTERS, letter.key,
                                                      letter.value))
        for fut in letters:
            await fut  # a failure here failed stop already (send_direct's callback)

    def settled(self) -> bool:
        """Was everything this loop handled delivered? (no batch being built or in flight, no
        changelog row pending: app.local_state keeps the local state only then)"""
        return not self._events and self.in_flight == 0 and not self.writes.pending

    # --- diagnostics -----------------------------------------------------------------------
    def describe(self) -> str:
        """This loop's state and where each of its tasks waits (logged when a partition
        stalls: :mod:`app.compat.stall_guard`, :mod:`app.compat.revoke`)."""
        queue, pipeline, lock = self._queue, self._pipeline, self._flushing
        held = {n: p.waiting_for for n, p in self.merge.partitions.items() if p.size()}
        lines = [
            f"join {self.join}: buffer {'?' if queue is None else queue.qsize()}, batch being "
            f"built {len(self._events)}, batches in flight {self.in_flight} (pipeline "
            f"{'?' if pipeline is None else pipeline.qsize()}/{self.max_in_flight}), flush lock "
            f"{'?' if lock is None else 'held' if lock.locked() else 'free'}, flow control "
            f"holds {self.merge.waiting()} (partition -> lagging inputs waited for: {held})"]
        for name, task in self._tasks.items():
            lines.append(f"  {name}: " + " -> ".join(awaiting.chain(task)))
        return "\n".join(lines)


def _text(key: bytes | None) -> str:
    """An output key for a person: its text, cut at 200 characters."""
    return "null" if key is None else repr(key[:200].decode("utf-8", errors="replace"))

"""Agent: every join spec, joined by event time, with corrections (the generic engine).

topics (events, dimension, ticks of one spec) -> one agent per spec -> tables (dimension
history, joins, clock, active keys or expiry index) -> output topics (revisions, dead letters,
late).

One agent reads all three co-partitioned topics of its spec, so per worker there is one
sequential loop per join: the state of both sides is never touched by two coroutines at once,
and an inner-mode event waiting for its dimension cannot race the dimension's arrival. The join
rules live in :mod:`app.logic.event_join`, the table layouts in :mod:`app.joins.state`; this
module validates, routes late records, keeps the stream clock and sends what they return.

Per record: validate -> late? -> advance the clock -> layout (load, pure logic, save); per batch
of records already waiting (see :meth:`JoinEngine.run`): flush the changelog -> send outputs ->
ack (Faust flushes outputs before it commits offsets). State first: a crash between the two
leaves a revision in state that never reached the topic, which the layout re-emits (per-key: a partition's current revisions, once per assignment; per-join: when
the record that produced it is re-delivered).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TP, TopicT
from prometheus_client import Gauge

from app import metrics, sinks
from app.faust_app import app, settings
from app.flow_control import EventTimeMerge
from app.joins import metrics as join_metrics
from app.joins.catalog import load_specs
from app.joins.spec import JoinSpec
from app.joins.state import Layout, PerJoinLayout, PerKeyLayout
from app.logic.event_join import Revision
from app.range_scan import range_table
from app.records import InvalidRecord, parse
from app.topics import dead_letters, late

log = logging.getLogger(__name__)

_raw = dict(key_serializer="raw", value_serializer="raw", partitions=settings.partitions)
_json = dict(partitions=settings.partitions,
             schema=faust.Schema(key_serializer="json", value_serializer="json"))
# key_type=bytes too: Faust derives the changelog's key serializer from key_type alone (json
# otherwise), and recovery would then fail to decode the byte keys
_bytes_json = dict(partitions=settings.partitions, key_type=bytes,
                   schema=faust.Schema(key_serializer="raw", value_serializer="json"))


@dataclass(frozen=True, slots=True)
class Out:
    """A record to send once state is durable."""

    topic: TopicT
    key: bytes | None
    value: bytes


@dataclass(frozen=True)
class JoinTables:
    """A spec's tables. ``index``: active keys (per-key layout) or the expiry index (per-join)."""

    history: faust.Table  # key -> [[event_time, *copied values], ...] sorted
    joins: faust.Table
    clock: faust.Table  # partition -> stream time (greatest event time seen; never decreases)
    index: faust.Table


def make_tables(spec: JoinSpec) -> JoinTables:
    """Tables named after the spec: ``<name>-dimension``, ``-joins``, ``-clock``, ``-index``."""
    n = spec.name
    history = app.Table(f"{n}-dimension", default=None, **_json)
    clock = app.Table(f"{n}-clock", default=None, **_json)
    if spec.layout == "per-key":
        return JoinTables(history, app.Table(f"{n}-joins", default=None, **_json), clock,
                          app.Table(f"{n}-active", default=None, **_json))
    # (key, join id) -> join;  (partition, event_time, key, join id) -> 1
    return JoinTables(history, range_table(app, f"{n}-joins", default=None, **_bytes_json),
                      clock, range_table(app, f"{n}-expiry", default=None, **_bytes_json))


class JoinEngine:
    """One spec's agent, its topics and tables."""

    def __init__(self, spec: JoinSpec, *, inputs: TopicT | None = None,
                 output: TopicT | None = None, ticks: TopicT | None = None,
                 tables: JoinTables | None = None, clock_gauge: Gauge | None = None) -> None:
        self.spec = spec
        self.inputs = inputs or app.topic(*spec.inputs, allow_empty=True, **_raw)
        self.ticks = ticks or app.topic(spec.ticks, internal=True, **_raw)  # (p) -> revisit p
        self.output = output or app.topic(spec.output, key_serializer="raw",
                                          value_serializer="raw")  # join id -> revision
        self.tables = tables or make_tables(spec)
        t = self.tables
        self.layout: Layout = (PerKeyLayout(spec, t.history, t.joins, t.index)
                               if spec.layout == "per-key" else
                               PerJoinLayout(spec, t.history, t.joins, t.index))
        self.clock_gauge = clock_gauge
        #: partitions whose recovered revisions this process has re-emitted (per process)
        self.resumed: set[int] = set()
        app.on_partitions_assigned.connect(self._forget_lost_partitions)
        #: flow control: the dimension, then the events (ties go to the dimension)
        self.merge = EventTimeMerge((spec.dimension.topic, spec.events.topic), self._lag,
                                    max_idle_s=settings.flow_max_idle_ms / 1000,
                                    max_buffered=settings.flow_max_buffered,
                                    enabled=settings.flow_control)
        self._wakeups: set[int] = set()  # partitions with a wake-up tick scheduled
        app.on_revoke_drop.append(self._drop_waiting)

        async def join_agent(stream: Any) -> None:
            await self.run(stream)

        join_agent.__qualname__ = join_agent.__name__ = f"{spec.name}_join"
        join_agent.__module__ = __name__
        self.agent = app.agent(self.inputs, name=f"{__name__}.{spec.name}")(join_agent)

    # --- per record ----------------------------------------------------------------------------
    def _revision_out(self, rev: Revision) -> Out:
        metrics.revisions_out.labels(rev.cause).inc()
        join_metrics.revisions.labels(self.spec.name, rev.cause).inc()
        if self.spec.mode == "inner" and rev.revision == 1 and rev.cause != "arrival":
            join_metrics.released.labels(self.spec.name).inc()
        return Out(self.output, rev.id.encode(), json.dumps(self.spec.to_wire(rev)).encode())

    def _advance_clock(self, partition: int, event_time: int) -> int:
        clock = self.tables.clock.get(partition)
        if clock is None or event_time > clock:
            self.tables.clock[partition] = clock = event_time
            join_metrics.stream_time.labels(self.spec.name, str(partition)).set(event_time)
            if self.clock_gauge is not None:
                self.clock_gauge.labels(str(partition)).set(event_time)
        return clock

    def _limit(self, clock: int, is_event: bool) -> int | None:
        """Records before this event time are late (None: none is)."""
        horizon = clock - self.spec.retention_ms
        if not is_event:
            return horizon if self.spec.late_dimensions else None
        if self.spec.window_ms is None:
            return horizon
        return max(horizon, clock - self.spec.window_ms)

    def _release_from(self, clock: int) -> int:
        """Held events older than this stay held: past the emit window or the horizon."""
        horizon = clock - self.spec.retention_ms
        return horizon if self.spec.window_ms is None else max(horizon,
                                                              clock - self.spec.window_ms)

    def _side(self, topic: str) -> Any:
        """The spec side (events or dimension) an input topic feeds."""
        return self.spec.events if topic == self.spec.events.topic else self.spec.dimension

    def parse(self, topic: str, key: bytes | None, value: bytes | None) -> Any:
        """The validated record, or the :class:`InvalidRecord` that says why it is not one."""
        try:
            return parse(self._side(topic).model, key, value)
        except InvalidRecord as exc:
            return exc

    def event_time(self, topic: str, rec: Any) -> int:
        """A parsed record's event time (-1 for an invalid one: it goes first, to dead letters)."""
        return -1 if isinstance(rec, InvalidRecord) else getattr(rec, self._side(topic).time)

    def on_input(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None, parsed: Any = None) -> list[Out]:
        """One event or dimension record: validate, route late ones, join, return the sends."""
        spec = self.spec
        is_event = topic == spec.events.topic
        which = "events" if is_event else "dimension"
        metrics.records_in.labels(topic).inc()
        join_metrics.records.labels(spec.name, which).inc()
        rec: Any = parsed if parsed is not None else self.parse(topic, key, value)
        if isinstance(rec, InvalidRecord):
            metrics.dead_letters.labels(topic).inc()
            join_metrics.dead.labels(spec.name, which).inc()
            return [Out(dead_letters, key, sinks.dead_letter(topic, partition, offset, key,
                                                             value, str(rec)))]
        event_time = self.event_time(topic, rec)
        clock = self.tables.clock.get(partition)
        limit = None if clock is None else self._limit(clock, is_event)
        if limit is not None and event_time < limit:
            metrics.late_records.labels(topic).inc()
            join_metrics.late.labels(spec.name, which).inc()
            return [Out(late, key, sinks.late_record(topic, partition, offset, rec.model_dump(),
                                                     event_time, clock, limit))]
        clock = self._advance_clock(partition, event_time)
        horizon = clock - spec.retention_ms
        release_from = self._release_from(clock)
        if is_event:
            revisions, held = self.layout.on_event(partition, spec.event_of(rec), horizon,
                                                   release_from)
            if held:
                join_metrics.held.labels(spec.name).inc()
        else:
            revisions = self.layout.on_version(partition, spec.key_of(rec, spec.dimension),
                                               spec.version_of(rec), horizon, release_from)
        return [self._revision_out(r) for r in revisions]

    def on_tick(self, partition: int) -> list[Out]:
        """Revisit partition ``partition``: review recent joins, finalise and purge old state."""
        clock = self.tables.clock.get(partition)
        if clock is None:
            return []
        revisions, purged = self.layout.on_tick(partition, clock, self._release_from(clock))
        metrics.joins_finalised.inc(purged.joins)
        join_metrics.finalised.labels(self.spec.name).inc(purged.joins)
        join_metrics.unmatched.labels(self.spec.name).inc(purged.unmatched)
        return [self._revision_out(r) for r in revisions]

    async def _forget_lost_partitions(self, app: Any, assigned: set[Any], **kwargs: Any) -> None:
        """A partition that left this worker comes back with recovered state: re-emit it again."""
        self.resumed.intersection_update(tp.partition for tp in assigned
                                         if tp.topic == self.spec.ticks)
        self._drop_waiting()

    def resume(self, partition: int) -> list[Out]:
        """Re-emit, once per assignment, what the layout says may have been lost in a crash."""
        self.resumed.add(partition)
        return [Out(self.output, r.id.encode(), json.dumps(self.spec.to_wire(r)).encode())
                for r in self.layout.resume(partition)]

    #: most records handled between two flushes: bounds what one flush (and a crash) holds
    max_batch = 500

    def handle(self, msg: Any, parsed: Any = None) -> list[Out]:
        """One message of the agent's topics -> what to send once state is durable."""
        try:
            outs = [] if msg.partition in self.resumed else self.resume(msg.partition)
            if msg.topic == self.spec.ticks:
                return outs + self.on_tick(msg.partition)
            return outs + self.on_input(msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                                        parsed)
        except Exception as exc:  # a bug must not kill the worker nor lose the record
            log.exception("join %s failed on %s[%s]@%s", self.spec.name, msg.topic,
                          msg.partition, msg.offset)
            return [Out(dead_letters, msg.key, sinks.dead_letter(
                msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                f"internal error: {exc!r}"))]

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
            next_offset = getattr(consumer, "_committed_offset", {}).get(tp) or 0
        return highwater > next_offset

    def _drop_waiting(self) -> None:
        """A rebalance starts: let go of held records (unacked, so delivered again after it)."""
        self.merge.reset()
        join_metrics.flow_waiting.labels(self.spec.name).set(0)

    def _wake(self, partition: int) -> None:
        """A wait may have timed out with nothing else arriving: a tick makes the agent look."""
        self._wakeups.discard(partition)
        asyncio.ensure_future(self._send_wake(partition))

    async def _send_wake(self, partition: int) -> None:
        try:
            await self.ticks.send(value=b"{}", partition=partition)
        except Exception as exc:  # the worker stops (producer gone); revisit ticks also poll
            log.info("wake-up tick for partition %s not sent: %r", partition, exc)

    def _schedule_wakeups(self) -> None:
        loop = asyncio.get_running_loop()
        for partition in self.merge.waiting_partitions():
            if partition not in self._wakeups:
                self._wakeups.add(partition)
                loop.call_later(self.merge.max_idle_s + 0.05, self._wake, partition)

    def ready(self, event: Any) -> list[tuple[Any, Any]]:
        """What may be handled now that ``event`` arrived: (event, parsed record) in order.

        Inputs go through flow control (event-time order across the joined topics); a tick
        first lets go of records whose wait has timed out, then revisits its partition."""
        msg = event.message
        forced = self.merge.forced
        if msg.topic == self.spec.ticks:
            out = self.merge.poll() + [(event, None)]
        else:
            parsed = self.parse(msg.topic, msg.key, msg.value)
            out = self.merge.offer(msg.topic, msg.partition, msg.offset,
                                   self.event_time(msg.topic, parsed), (event, parsed))
        if self.merge.forced > forced:
            join_metrics.flow_forced.labels(self.spec.name).inc(self.merge.forced - forced)
        join_metrics.flow_waiting.labels(self.spec.name).set(self.merge.waiting())
        return out

    async def run(self, stream: Any) -> None:
        """Join every record as it arrives; revisit a partition on each tick.

        Records pass flow control first (:mod:`app.flow_control`: under a backlog the joined
        inputs of a partition go in event-time order; live, nothing waits). They are handled
        one at a time but made durable in batches: whatever already waits in the agent's queue
        (up to ``max_batch`` records) is handled, then ONE producer flush makes the batch's
        changelog writes durable, then its outputs are sent, then its records are acknowledged.
        Idle, a batch is one record; under a backlog one flush serves hundreds. Outputs reach
        the broker before the offsets that produced them are committed: a record is acked only
        after its outputs are handed to the producer, and Faust's commit flushes the producer
        before it commits offsets (``Consumer._commit_offsets``). A record flow control holds
        back is not acked, so its offset is not committed and a crash delivers it again.
        """
        stream.enable_acks = False  # acked below, once the batch's outputs are sent
        queue = getattr(stream.channel, "queue", None)  # the agent's buffer of delivered records
        events: list[Any] = []
        outs: list[Out] = []
        generation = None
        async for event in stream.events():
            if event.message.generation_id != generation:  # a rebalance: held ones come again
                generation = event.message.generation_id
                self._drop_waiting()
            for ready, parsed in self.ready(event):
                events.append(ready)
                outs += self.handle(ready.message, parsed)
            if events and (len(events) >= self.max_batch or queue is None or queue.empty()):
                if outs:
                    await app.producer.flush()  # state first: no revision outruns its changelog
                    for out in outs:
                        await out.topic.send(key=out.key, value=out.value, force=True)
                for done in events:
                    await stream.ack(done)
                events, outs = [], []
            self._schedule_wakeups()


def _build_engines() -> dict[str, JoinEngine]:
    """An engine per spec; the mood spec keeps the original mood join's topics and tables."""
    from app import tables, topics

    engines = {}
    for spec in load_specs(settings):
        if spec.name == "moods":
            engines[spec.name] = JoinEngine(
                spec, inputs=topics.mood_join_inputs, output=topics.mood_recommendations,
                ticks=topics.ticks, clock_gauge=metrics.stream_time,
                tables=JoinTables(tables.mood_history, tables.recent_joins, tables.stream_clock,
                                  tables.active_keys))
        else:
            engines[spec.name] = JoinEngine(spec)
    return engines


#: spec name -> engine, for every join this worker runs (app.joins.catalog)
engines = _build_engines()

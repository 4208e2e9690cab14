"""Agents: every join spec, joined by event time, with corrections (the one engine).

topics (events, dimension, ticks of one spec; :mod:`app.topology`) -> one agent per spec ->
tables (dimension history, joins, clock, active keys or expiry index) -> output topics
(revisions, dead letters, late).

One agent reads all three co-partitioned topics of its spec, so per worker there is one
sequential loop per join: the state of both sides is never touched by two coroutines at once,
and an inner-mode event waiting for its dimension cannot race the dimension's arrival. The join
rules live in :mod:`app.logic.event_join`, the table layouts in :mod:`app.joins.state`; this
module validates, routes late records, keeps the stream clock and returns what they emit; the
loop (:mod:`app.agents.durable`) makes it durable: flush the changelog -> send -> ack.

State first: a crash between the flush and the sends leaves revisions in state that never
reached the topic, which the layout re-emits (per-key: a partition's current revisions, once
per assignment; per-join: when the record that produced it is re-delivered) — gap-free: with
each join's current revision go those it superseded whose source record is not known
delivered (acked by this process, or committed: :meth:`JoinEngine.delivered`;
:mod:`app.joins.state`).
"""

from __future__ import annotations

import orjson
from typing import Any

from app import metrics, sinks
from faust.types import TP

from app.agents.durable import DurableLoop, Out, dead_letter
from app.compat.stores import committed_offset
from app.faust_app import app
from app.joins.state import Layout, PerJoinLayout, PerKeyLayout
from app.logic.event_join import Revision
from app.records import InvalidRecord, parse
from app.topology import JoinTopology, joins, late

__all__ = ["JoinEngine", "engines"]


class JoinEngine:
    """One spec's agent over its topology (topics and tables)."""

    def __init__(self, topology: JoinTopology) -> None:
        self.topology = topology
        self.spec = spec = topology.spec
        self.tables = t = topology.tables
        self.output = topology.output
        #: a revision's source: [input, offset], input = its topic's index here
        self.inputs = (spec.events.topic, spec.dimension.topic, spec.ticks)
        self._tps: dict[tuple[int, int], TP] = {}
        self.layout: Layout = (PerKeyLayout(spec, t.history, t.joins, t.index, self.delivered)
                               if spec.layout == "per-key" else
                               PerJoinLayout(spec, t.history, t.joins, t.index, self.delivered))
        #: partitions whose recovered revisions this process has re-emitted (per process)
        self.resumed: set[int] = set()
        self._revisions: dict[str, Any] = {}  # cause -> its revisions counter
        self._stream_time: dict[int, Any] = {}  # partition -> its stream-time gauge
        app.on_partitions_assigned.connect(self._forget_lost_partitions)
        #: flow control: the dimension, then the events (ties go to the dimension)
        self.loop = DurableLoop(spec.name, (spec.dimension.topic, spec.events.topic),
                                topology.ticks, self.parse, self.handle,
                                tables=(t.history, t.joins, t.clock, t.index))

        async def join_agent(stream: Any) -> None:
            await self.loop.run(stream)

        join_agent.__qualname__ = join_agent.__name__ = f"{spec.name}_join"
        join_agent.__module__ = __name__
        self.agent = app.agent(topology.inputs, name=f"{__name__}.{spec.name}")(join_agent)

    # --- per record ----------------------------------------------------------------------------
    def delivered(self, partition: int, src: Any) -> bool:
        """Is the output of a revision made by input record ``src`` surely in the log? Yes once
        this process acked that record (the broker had its outputs:
        :class:`~app.agents.durable.AckedRuns`) or its offset is committed (Faust flushes the
        producer before it commits; the only knowledge a restarted worker has). A source of
        None (a row saved before sources were kept) counts as delivered."""
        if src is None:
            return True
        index, offset = src
        if self.loop.acked.holds(self.inputs[index], partition, offset):
            return True
        tp = self._tps.get((index, partition))
        if tp is None:
            tp = self._tps[(index, partition)] = TP(self.inputs[index], partition)
        committed = committed_offset(app.consumer, tp)
        return committed is not None and offset < committed

    def _revision_out(self, rev: Revision) -> Out:
        counter = self._revisions.get(rev.cause)
        if counter is None:  # prometheus' labels() costs a lock: once per cause
            counter = self._revisions[rev.cause] = metrics.revisions_out.labels(self.spec.name,
                                                                                rev.cause)
        counter.inc()
        if self.spec.mode == "inner" and rev.revision == 1 and rev.cause != "arrival":
            metrics.released.labels(self.spec.name).inc()
        return self._out(rev)

    def _out(self, rev: Revision, again: bool = False) -> Out:
        return Out(self.output, rev.id.encode(), orjson.dumps(self.spec.to_wire(rev)), again)

    def _advance_clock(self, partition: int, event_time: int) -> int:
        clock = self.tables.clock.get(partition)
        if clock is None or event_time > clock:
            self.tables.clock[partition] = clock = event_time
            gauge = self._stream_time.get(partition)
            if gauge is None:
                gauge = self._stream_time[partition] = metrics.stream_time.labels(
                    self.spec.name, str(partition))
            gauge.set(event_time)
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

    def parse(self, topic: str, key: bytes | None, value: bytes | None) -> tuple[Any, int]:
        """(the validated record, its event time); raises :class:`InvalidRecord`."""
        side = self._side(topic)
        rec = parse(side.model, key, value)
        return rec, getattr(rec, side.time)

    def on_input(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None, parsed: Any = None) -> list[Out]:
        """One event or dimension record: validate, route late ones, join, return the sends."""
        spec = self.spec
        is_event = topic == spec.events.topic
        if parsed is None:
            try:
                parsed, _ = self.parse(topic, key, value)
            except InvalidRecord as exc:
                parsed = exc
        if isinstance(parsed, InvalidRecord):
            return [dead_letter(spec.name, topic, partition, offset, key, value, str(parsed))]
        rec = parsed
        event_time = getattr(rec, self._side(topic).time)
        clock = self.tables.clock.get(partition)
        limit = None if clock is None else self._limit(clock, is_event)
        if limit is not None and event_time < limit:
            metrics.late_records.labels(spec.name, topic).inc()
            return [Out(late, key, sinks.late_record(topic, partition, offset, rec.model_dump(),
                                                     event_time, clock, limit))]
        clock = self._advance_clock(partition, event_time)
        horizon = clock - spec.retention_ms
        release_from = self._release_from(clock)
        if is_event:
            revisions, held = self.layout.on_event(partition, spec.event_of(rec), horizon,
                                                   release_from, [0, offset])
            if held:
                metrics.held.labels(spec.name).inc()
        else:
            revisions = self.layout.on_version(partition, spec.key_of(rec, spec.dimension),
                                               spec.version_of(rec), horizon, release_from,
                                               [1, offset])
        return [self._revision_out(r) for r in revisions]

    def on_tick(self, partition: int, offset: int | None = None) -> list[Out]:
        """Revisit partition ``partition``: review recent joins, finalise and purge old state."""
        clock = self.tables.clock.get(partition)
        if clock is None:
            return []
        revisions, purged = self.layout.on_tick(partition, clock, self._release_from(clock),
                                                None if offset is None else [2, offset])
        metrics.joins_finalised.labels(self.spec.name).inc(purged.joins)
        metrics.unmatched.labels(self.spec.name).inc(purged.unmatched)
        return [self._revision_out(r) for r in revisions]

    async def _forget_lost_partitions(self, app: Any, assigned: set[Any], **kwargs: Any) -> None:
        """A partition that left this worker comes back with recovered state: re-emit it again.
        (What flow control held is let go by the loop itself: ``DurableLoop.drop_waiting``.)"""
        self.resumed.intersection_update(tp.partition for tp in assigned
                                         if tp.topic == self.spec.ticks)

    def resume(self, partition: int) -> list[Out]:
        """Re-emit, once per assignment, what the layout says may have been lost in a crash."""
        self.resumed.add(partition)
        return [self._out(r, again=True) for r in self.layout.resume(partition)]

    def handle(self, msg: Any, parsed: Any = None) -> list[Out]:
        """One message of the agent's topics -> what to send once state is durable."""
        outs = [] if msg.partition in self.resumed else self.resume(msg.partition)
        if msg.topic == self.spec.ticks:
            return outs + self.on_tick(msg.partition, msg.offset)
        return outs + self.on_input(msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                                    parsed)


#: spec name -> engine, for every join this worker runs (app.topology.joins)
engines: dict[str, JoinEngine] = {name: JoinEngine(t) for name, t in joins.items()}

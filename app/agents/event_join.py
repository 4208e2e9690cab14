"""Agents: every join spec, joined by event time, with corrections (the one engine).

topics (events, dimension, ticks of one spec; :mod:`app.topology`) -> one agent per spec ->
tables (dimension history, joins, clock; :mod:`app.joins.state`) -> output topics (revisions,
dead letters, late).

One agent reads all three co-partitioned topics of its spec, so per worker there is one
sequential loop per join: the state of both sides is never touched by two coroutines at once,
and an inner-mode event waiting for its dimension cannot race the dimension's arrival. The join
rules live in :mod:`app.logic.event_join`, the state layout in :mod:`app.joins.state`; this
module validates, routes late records, keeps the stream clock and returns what they emit; the
loop (:mod:`app.loop.durable`) makes it durable, a batch at a time: changelog -> outputs ->
acks.

State first: a crash between the changelog and the outputs leaves revisions in state that
never reached the topic; the record was not acked, so it is delivered again and the layout
re-emits what it touched — gap-free: with each join's current revision go those it superseded
whose source record is not known delivered (acked by this process, or committed:
:meth:`JoinEngine.delivered`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson
from faust.types import TP

from app import metrics, runtime
from app.compat.stores import committed_offset
from app.faust_app import app, settings
from app.inputs.admission import Early
from app.inputs.parsers import as_dict
from app.inputs.records import InvalidRecord
from app.inputs.tombstones import NOT_A_DELETE, REKEYED, End, side_end_reader
from app.joins.fingerprint import SpecGuard
from app.joins.joins_table import joins_overlay
from app.joins.state import FinalJoinError, JoinState
from app.kafka.schema_registry import shared_registry, subject_of
from app.logic.event_join import CAUSES, Revision
from app.logic.finality import next_step, ready_now
from app.logic.histories import Version, end
from app.loop.dead_letters import dead_letter
from app.loop.durable import DurableLoop, agent_body
from app.loop.types import Out
from app.outputs import sinks
from app.outputs.revision_formats import SCHEMA_TYPES, encoder, revision_schema
from app.state.overlay import Overlay
from app.state.store_io import StoreIO
from app.topology import JoinTopology, joins

if TYPE_CHECKING:
    from prometheus_client import Counter

__all__ = ["JoinEngine", "engines"]

log = logging.getLogger(__name__)


class JoinEngine:
    """One spec's agent over its topology (topics and tables)."""

    def __init__(self, topology: JoinTopology) -> None:
        self.topology = topology
        self.spec = spec = topology.spec
        self.join = spec.name
        self.tables = t = topology.tables
        self.output = spec.output
        self.late_topic = settings.late_topic
        self.dead_letters = settings.dead_letter_topic
        #: a revision's source: [input, offset], input = its topic's index here
        self.inputs = spec.inputs  # a repartitioned side's: its repartition topic
        self.overlays = (
            Overlay(StoreIO(t.history)),
            joins_overlay(StoreIO(t.joins)),
            Overlay(StoreIO(t.clock)),
        )
        #: the spec's fingerprint against each partition's (app.joins.fingerprint): a state
        #: written by a spec this one cannot read ends the worker (app.runtime.refuse)
        self.guard = SpecGuard(
            spec, spec.partitions or settings.partitions, runtime.refuse, log.warning
        )
        self.state = JoinState(spec, *self.overlays, self.delivered, self.emitted, guard=self.guard)
        #: (key, value, timestamp) -> the flat record: msgspec's fast path for a flat side
        #: with an epoch-ms time, the shaped parser for one with nested paths, another time
        #: format or the Kafka timestamp (docs/joins/declarative.md#records-shaped-otherwise)
        #: (a side written otherwise than JSON text decodes it first: app.inputs.wire_formats,
        #: its writer schemas fetched before each batch, :meth:`prepare`)
        self.schemas = shared_registry(settings)
        self._parsers = {
            spec.events.input: spec.events.parser(self.schemas),
            spec.dimension.input: spec.dimension.parser(self.schemas),
        }
        #: a dimension's tombstone: (key, timestamp) -> End (None: a repartitioned dimension)
        dim = spec.dimension
        self._read_end = None if dim.repartition else side_end_reader(dim, self.schemas)
        self._tombstones = metrics.tombstones.labels(spec.name, dim.topic)
        #: input topic -> its side's own tolerance of records from the future (a side with
        #: ``max_future_ms``: versions effective later; app.loop.intake judges by it)
        self.max_future_ms = {
            s.input: s.max_future_ms
            for s in (spec.events, spec.dimension)
            if s.max_future_ms is not None
        }
        #: input topic -> (its keys' framed format, its values'), None where not framed
        self._framed: dict[str, tuple[str | None, str | None]] = {
            side.input: (
                "avro" if side.framed[0] else None,
                side.format if side.framed[1] else None,
            )
            for side in (spec.events, spec.dimension)
            if any(side.framed)
        }
        #: a revision's bytes: JSON text, or with output_format avro/json-sr the registry's
        #: framing, known once its schema is registered (:meth:`register_output`)
        self._encode: Any = orjson.dumps if spec.output_format == "json" else None
        if self._encode is None:
            app.start_steps.append(self.register_output)
        #: cause -> its counter (a str key: ``_counts`` mixes the causes with "released")
        self._revisions: dict[str, Counter] = {
            c: metrics.revisions_out.labels(spec.name, c) for c in CAUSES
        }
        self._released = metrics.released.labels(spec.name)
        self._held = metrics.held.labels(spec.name)
        self._counts: dict[str, int] = {}  # cause (or "released") -> revisions of this batch
        #: does the spec hold events (inner, or a bounded hold)? Then a first revision not
        #: made by its event's arrival is a release
        self._inner = spec.mode == "inner" or spec.hold_ms is not None
        self._hold = spec.hold_ms is not None
        self._stream_time: dict[int, Any] = {}  # partition -> its stream-time gauge
        self._tps: dict[tuple[int, int], TP] = {}
        #: finality (app.logic.finality): the promises' topic (None: none), emit=final, per
        #: partition the batches whose promise waits for their delivery ((stream time at the
        #: batch's end, the record that moved it)), the record that last moved the stream
        #: time, and the partitions whose promise this batch has looked at
        self._final_topic = spec.final_topic
        self._emit_final = spec.emit == "final"
        self._pending: dict[int, list[tuple[int, Any]]] = {}
        #: partition -> what its delivered batches allow to promise, not used yet (a
        #: promise was in flight when they were found delivered: app.logic.finality.ready_now)
        self._ready: dict[int, int] = {}
        self._mover: dict[int, Any] = {}
        self._promised_now: set[int] = set()
        #: the group generation ``_pending`` belongs to: a rebalance drops the batches in
        #: flight unacked (their partitions' records are read again), so it starts over
        self._generation: Any = None
        #: per partition, what the process that handled it last had handled and this one has
        #: not delivered again yet (read once per group generation): no new promise until it
        #: is (:meth:`_promise`; what this process handled is written per batch: end_batch)
        self._replaying: dict[int, list[list[int]]] = {}
        self._replay_seen: set[int] = set()
        self._replay_generation: Any = None
        #: what each record asks of the spec, read once here instead of per record
        self._events_in = spec.events.input
        self._time_attr = {
            spec.events.input: spec.events.time,
            spec.dimension.input: spec.dimension.time,
        }
        self._retention = spec.retention_ms
        self._window = spec.window_ms
        self._late_dimensions = spec.late_dimensions
        self._to_wire, self._out_key = spec.to_wire, spec.out_key
        #: lineage: the record being handled (topic, partition, offset; three attributes, no
        #: object per record)
        self._handling = ""
        self._handling_p = 0
        self._handling_offset: int | None = None
        #: flow control: the dimension, then the events (ties go to the dimension)
        self.loop = DurableLoop(
            self, spec.inputs, merged=(spec.dimension.input, spec.events.input), ticks=spec.ticks
        )
        body = agent_body(self.loop)
        body.__qualname__ = body.__name__ = f"{spec.name}_join"
        body.__module__ = __name__
        app.topics.add(topology.inputs)  # subscribed though the stream is never iterated
        self.agent = app.agent(topology.inputs, name=f"{__name__}.{spec.name}")(body)

    # --- what the layout asks ----------------------------------------------------------------
    def delivered(self, partition: int, src: Any) -> bool:
        """Is the output of a revision made by input record ``src`` surely in the log? Yes once
        this process acked that record (the broker had its outputs:
        :class:`~app.loop.acks.AckedRuns`) or its offset is committed (the only knowledge a
        restarted worker has). A source of None (a row saved before sources were kept) counts
        as delivered."""
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

    def emitted(self, partition: int, src: Any) -> bool:
        """Are the outputs of input record ``src`` in the log, or on their way there from this
        process (handled since the last rebalance: a failed send fails the worker stop, and the
        restarted worker knows nothing of it)? A duplicate of a record need not re-send them."""
        if src is None:
            return True
        index, offset = src
        return self.loop.handled.holds(self.inputs[index], partition, offset) or self.delivered(
            partition, src
        )

    # --- outputs -----------------------------------------------------------------------------
    def _revision_out(self, rev: Revision) -> Out:
        if rev.again:
            return self._out(rev, again=True)
        counts = self._counts
        cause = rev.cause
        counts[cause] = counts.get(cause, 0) + 1  # counted once per batch (end_batch)
        if self._inner and rev.revision == 1 and cause != "arrival":
            counts["released"] = counts.get("released", 0) + 1
        return self._out(rev)

    def _out(self, rev: Revision, again: bool = False) -> Out:
        """Its send, with ``partition``, the input partition whose finality promise covers it
        (docs/concepts/guarantees.md), and its lineage: ``source``, the input record that made
        it (topic, partition, offset; docs/concepts/revision-log.md#lineage) — the revision's
        own when it has one (a re-emit, a final revision), else the record being handled.
        Cost: one small dict per revision."""
        wire = self._to_wire(rev)
        src = rev.source
        # the input partition whose finality promise covers it (the outputs are keyed by join
        # id, so their own partition says nothing of it): the partition being handled, that of
        # the join's key in the join's co-partitioned inputs
        wire["partition"] = self._handling_p
        wire["source"] = (
            {
                "topic": self._handling,
                "partition": self._handling_p,
                "offset": self._handling_offset,
            }
            if src is None
            else {"topic": self.inputs[src[0]], "partition": self._handling_p, "offset": src[1]}
        )
        return Out(self.output, self._out_key(wire, rev.id), self._encode(wire), again)

    def lineage(self, src: Any, partition: int) -> dict[str, Any] | None:
        """A stored source (``[input, offset]``) as the output names it (None: unknown)."""
        if src is None:
            return None
        return {"topic": self.inputs[src[0]], "partition": partition, "offset": src[1]}

    def _outs(self, partition: int, revisions: list[Revision]) -> list[Out]:
        """The sends of ``revisions`` of ``partition``: all of them, unless the spec keeps
        promises: then none of a join its partition's promise covers (only a re-emit of one
        the log has: app.logic.finality), and with emit=final none at all (each join's final
        revision goes with the promise that covers it)."""
        if self._final_topic is None:
            return [self._revision_out(r) for r in revisions]
        if self._emit_final:
            return []  # counted when a promise sends them (_promise)
        before = self.state.promise(partition).final_before
        return [
            self._revision_out(r) for r in revisions if before is None or r.event_time >= before
        ]

    # --- finality ------------------------------------------------------------------------------
    def _promise(self, partition: int, src: Any) -> list[Out]:
        """At a batch's first record of ``partition``: settle, re-send or make its promise
        (:func:`app.logic.finality.next_step`); the sends it needs, carried by this record."""
        self._promised_now.add(partition)
        state = self.state
        promise = state.promise(partition)
        replaying = self._replay_left(partition)
        ready = ready_now(
            self._pending.get(partition) or [],
            lambda s: self.delivered(partition, s),
            self.spec.retention_ms,
            self._ready.get(partition),
        )
        source = promise.source
        step, lo, hi = next_step(
            promise,
            ready if replaying is None else None,
            source is not None and self.delivered(partition, source),
            source is not None and self.emitted(partition, source),
        )
        if step == "new":
            self._ready.pop(partition, None)
        elif ready is not None:
            self._ready[partition] = ready  # for a batch that can use it (ready_now)
        if step == "none":
            return []
        if step == "settled":
            state.save_promise(partition, promise)
            return []
        assert hi is not None
        promise.source = src
        state.save_promise(partition, promise)
        again = step == "again"
        outs = (
            [
                self._out(r, True) if again else self._revision_out(r)
                for r in state.final_revisions(partition, lo, hi)
            ]
            if self._emit_final
            else []
        )
        value = {"join": self.join, "partition": partition, "final_before": hi}
        topic = self._final_topic
        assert topic is not None  # on_record calls _promise only for a spec with promises
        outs.append(Out(topic, str(partition).encode(), orjson.dumps(value), True))
        return outs

    def _replay_left(self, partition: int) -> list[list[int]] | None:
        """What of partition ``partition`` the process that handled it last (a killed worker, a
        rebalance's previous owner) handled and this one has not delivered again yet
        (``[[input, offset], ...]``), or None.

        Why: that process may have made revisions and lost their sends (a kill -9 between a
        batch's changelog and its outputs); its records come again and re-send them, but a
        promise made before they do would cover those joins, and a re-send of a covered join is
        dropped (:meth:`_outs`: the log is assumed to have it). Flow control hands a lagging
        input's re-delivered records after the others' once its wait times out, so a fresh
        process can move the stream time and deliver a batch first: a fresh clone's
        ``test_finality_broker.py`` lost a correction so (findings.md). No promise is made
        until every input is delivered again past what the last process handled."""
        generation = app.consumer_generation_id
        if self._replay_generation != generation:
            self._replay_generation = generation
            self._replaying.clear()
            self._replay_seen.clear()
        if partition not in self._replay_seen:
            self._replay_seen.add(partition)
            stored = self.state.handled_to(partition)
            if stored:
                self._replaying[partition] = stored
        left = self._replaying.get(partition)
        if left is not None and all(self.delivered(partition, s) for s in left):
            del self._replaying[partition]
            return None
        return left

    def _save_handled(self) -> None:
        """Per partition this batch handled, the last offset of each input handled so far (the
        loop's own record of it: :attr:`app.loop.durable.DurableLoop.handled`), with the
        batch's changelog (:meth:`_replay_left` reads it after a restart or a rebalance)."""
        state, handled = self.state, self.loop.handled
        for partition in self._promised_now:
            frontier = {pair[0]: pair[1] for pair in state.handled_to(partition)}
            for index, topic in enumerate(self.inputs):
                end = handled.end(topic, partition)
                if end is not None:
                    frontier[index] = end - 1
            state.save_handled(partition, sorted([i, o] for i, o in frontier.items()))

    # --- the Schema Registry -------------------------------------------------------------------
    async def register_output(self) -> None:
        """Register the output's schema under ``<output>-value`` (at start; waits while the
        registry does not answer, a refusal stops the worker) and write revisions with it."""
        if self._encode is not None:
            return
        assert self.schemas is not None  # refused at start without ETJ_SCHEMA_REGISTRY_URL
        fmt = self.spec.output_format
        text = revision_schema(self.spec)
        schema_id = await self.schemas.register(subject_of(self.output), text, SCHEMA_TYPES[fmt])
        self._encode = encoder(fmt, schema_id, text)

    async def prepare(self, batches: list[Any]) -> None:
        """Before a batch is parsed (:meth:`app.loop.intake.Intake.take`): the writer schemas
        of its framed records fetched, the output's schema registered."""
        if self._encode is None:
            await self.register_output()
        if self._framed and self.schemas is not None:
            await self.schemas.prefetch_batches(self._framed, batches)

    # --- time ----------------------------------------------------------------------------------
    def end_batch(self) -> None:
        """The loop's batch is handled: stream times to the clock table and the gauges, the
        batch's revisions to their counters (once per batch, not under a lock per record)."""
        for cause, n in self._counts.items():
            (self._released if cause == "released" else self._revisions[cause]).inc(n)
        self._counts.clear()
        if self._promised_now:  # a spec with promises: the partitions this batch handled
            self._save_handled()
            self._promised_now.clear()
        if self._final_topic is not None and app.consumer_generation_id != self._generation:
            self._pending.clear()
            self._generation = app.consumer_generation_id
        for partition, t in self.state.end_batch().items():
            if self._final_topic is not None:
                self._pending.setdefault(partition, []).append((t, self._mover[partition]))
            gauge = self._stream_time.get(partition)
            if gauge is None:
                gauge = self._stream_time[partition] = metrics.stream_time.labels(
                    self.spec.name, str(partition)
                )
            gauge.set(t)

    def _limit(self, clock: int, is_event: bool, partition: int) -> int | None:
        """Records before this event time are late (None: none is)."""
        horizon = clock - self.spec.retention_ms
        floor = self.state.late_before.get(partition)  # a longer retention's (fingerprint)
        if floor is not None and floor > horizon:
            horizon = floor
        if not is_event:
            return horizon if self.spec.late_dimensions else None
        if self.spec.window_ms is None:
            return horizon
        return max(horizon, clock - self.spec.window_ms)

    def _release_from(self, clock: int) -> int:
        """Held events older than this stay held: past the emit window or the horizon."""
        horizon = clock - self.spec.retention_ms
        return horizon if self.spec.window_ms is None else max(horizon, clock - self.spec.window_ms)

    # --- the loop's callbacks ------------------------------------------------------------------
    def parse(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Any = None,
    ) -> tuple[Any, int]:
        """(the validated record, its event time); raises :class:`InvalidRecord`.
        ``timestamp``: the record's Kafka timestamp (epoch ms), for a ``$timestamp`` side.
        A tombstone (null value) on the dimension topic is an :class:`End` at its timestamp;
        on the events topic a dead letter (:data:`NOT_A_DELETE`)."""
        if value is None:
            if topic == self._events_in or self._read_end is None:
                raise InvalidRecord(NOT_A_DELETE if topic == self._events_in else REKEYED)
            ended = self._read_end(key, timestamp)
            return ended, ended.event_time
        rec = self._parsers[topic](key, value, timestamp, headers)
        return rec, getattr(rec, self._time_attr[topic])

    def on_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        parsed: Any = None,
    ) -> list[Out]:
        """One event or dimension record: validate, route late ones, join, return the sends."""
        spec = self.spec
        is_event = topic == self._events_in
        if parsed is None:
            try:
                parsed, _ = self.parse(topic, key, value)
            except InvalidRecord as exc:
                parsed = exc
        if isinstance(parsed, InvalidRecord):
            return [
                dead_letter(
                    spec.name, self.dead_letters, topic, partition, offset, key, value, str(parsed)
                )
            ]
        due = None
        if type(parsed) is Early:  # effective later: joined at its time, due later
            parsed, due = parsed
        rec = parsed
        event_time = rec.event_time if type(rec) is End else getattr(rec, self._time_attr[topic])
        moves = event_time if due is None else due  # what it moves stream time to
        src = [0 if is_event else 1, offset]
        self._handling, self._handling_p, self._handling_offset = topic, partition, offset
        final = self._final_topic is not None
        promised = (
            self._promise(partition, src) if (final and partition not in self._promised_now) else ()
        )
        state = self.state
        clock = state.stream_time(partition)
        if clock is not None:
            limit = self._limit(clock, is_event, partition)
            if limit is not None and event_time < limit:
                return [
                    *promised,
                    *self._late(
                        rec, topic, partition, offset, key, is_event, src, event_time, clock, limit
                    ),
                ]
        if clock is None or moves > clock:
            if final:
                self._mover[partition] = src  # the record whose delivery makes its batch's promise
            clock = state.advance(partition, moves)
        horizon = clock - self._retention
        window = self._window
        release_from = horizon if window is None else max(horizon, clock - window)
        # holds this record's stream time ended answer first: what comes at or after the
        # bound does not join their first answer (app.joins.state.JoinState.release_holds)
        ended = state.release_holds(partition, clock, src) if self._hold else ()
        if is_event:
            try:
                revisions, held = state.on_event(
                    partition, spec.event_of(rec), horizon, release_from, src
                )
            except FinalJoinError as exc:
                return [
                    *promised,
                    dead_letter(
                        spec.name, self.dead_letters, topic, partition, offset, key, value, str(exc)
                    ),
                ]
            if held:
                self._held.inc()
        else:
            dim_key, version = self._version(rec)
            if len(version) == 1:  # a tombstone's end, applied (a late one is not)
                self._tombstones.inc()
            revisions = state.on_version(partition, dim_key, version, horizon, release_from, src)
        if ended:
            revisions = [*ended, *revisions]
        if not final:
            out = self._revision_out
            return [out(r) for r in revisions]
        outs = self._outs(partition, revisions)
        return [*promised, *outs] if promised else outs

    def _late(
        self,
        rec: Any,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        is_event: bool,
        src: Any,
        event_time: int,
        clock: int,
        limit: int,
    ) -> list[Out]:
        """A record older than its limit: to the late topic; what it made when a crashed
        worker handled it (not late then) goes again."""
        spec = self.spec
        metrics.late_records.labels(spec.name, topic).inc()
        if is_event:
            e = spec.event_of(rec)
            again = self.state.on_late(partition, e.key, src, jid=e.id)
        else:
            dim_key, version = self._version(rec)
            again = self.state.on_late(partition, dim_key, src, v=version)
        record = rec.as_record() if type(rec) is End else as_dict(rec)
        return [
            *self._outs(partition, again),
            Out(
                self.late_topic,
                key,
                sinks.late_record(
                    topic, partition, offset, record, event_time, clock, limit, self.join
                ),
            ),
        ]

    def _version(self, rec: Any) -> tuple[str, Version]:
        """(join key, version) of a dimension record: a tombstone's is an end at its time."""
        if type(rec) is End:
            return rec.key, end(rec.event_time)
        spec = self.spec
        return spec.key_of(rec, spec.dimension), spec.version_of(rec)

    def on_tick(self, partition: int, offset: int | None = None) -> list[Out]:
        """Revisit partition ``partition``: purge state behind the horizon (and review)."""
        src = None if offset is None else [2, offset]
        self._handling, self._handling_p, self._handling_offset = (
            self.spec.ticks,
            partition,
            offset,
        )
        promised = (
            self._promise(partition, src)
            if (
                self._final_topic is not None
                and src is not None
                and partition not in self._promised_now
            )
            else []
        )
        clock = self.state.stream_time(partition)
        if clock is None:
            return promised
        ended: list[Revision] = []
        if self._hold:  # holds first: a join is answered before the horizon purges it
            ended = self.state.released_unsent(partition, clock)
            ended += self.state.release_holds(partition, clock, src)
        keep_from = None
        if self._emit_final:  # a join stays until its final revision is delivered
            keep_from = self.state.promise(partition).delivered_before
            keep_from = 0 if keep_from is None else keep_from
        revisions, purged = self.state.on_tick(
            partition, clock, self._release_from(clock), src, keep_from
        )
        revisions = ended + revisions
        if purged.joins:
            metrics.joins_finalised.labels(self.spec.name).inc(purged.joins)
        if purged.unmatched:
            metrics.unmatched.labels(self.spec.name).inc(purged.unmatched)
        return [*promised, *self._outs(partition, revisions)]


#: spec name -> engine, for every join this worker runs (app.topology.joins)
engines: dict[str, JoinEngine] = {name: JoinEngine(t) for name, t in joins.items()}

"""A loop's way in (steps 1 and 2 of :mod:`app.loop.durable`): the batches its inbox holds,
parsed and through the door, into flow control, and the records flow control lets go this turn.

Every input but the ticks goes through flow control (:mod:`app.inputs.flow_control`), which knows from
each batch's high water whether an input lags, and holds a partition's records until its other
inputs catch up in event time. What it holds is bounded twice: a turn lets go of at most
:attr:`Intake.max_batch` records, and a partition holding too many stops being fetched until it
holds fewer (back pressure on the consumer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from faust.types import TP

from app import metrics
from app.compat.stores import committed_offset
from app.faust_app import app, settings
from app.inputs.admission import Early, door
from app.inputs.flow_control import EventTimeMerge
from app.inputs.inbox import Batch, Inbox
from app.inputs.records import InvalidRecord
from app.logic.future_records import due_time, kafka_timestamp

if TYPE_CHECKING:
    from app.compat.consumer import EtjConsumer
    from app.loop.types import Engine

log = logging.getLogger(__name__)

#: an engine's parse: (topic, key, value, Kafka timestamp, headers) -> (the record, its event
#: time)
Parse = Callable[[str, bytes | None, bytes | None, int | None, Any], tuple[Any, int]]


class Intake:
    """One loop's inbox, door and flow control (module docstring)."""

    #: records handled per turn at most (every fetch waiting is taken into flow control, which
    #: lets go of this many in event-time order, the rest at the next turns): bounds what one
    #: batch holds in memory and how long its first output waits; a backlog of 50,000
    #: records came as one fetch
    max_batch = 5_000

    def __init__(
        self,
        engine: Engine,
        topics: Sequence[str],
        merged: Sequence[str] = (),
        ticks: str | None = None,
        door: bool = True,
    ) -> None:
        self.engine = engine
        #: records pass the door (app.inputs.admission); False for a hop that only passes
        #: records on, keyed otherwise (app.agents.repartition): the join's door judges them
        self.door = door
        self.join = engine.join
        self.inbox = Inbox(engine.join, topics)
        self.ticks = ticks
        #: every input but the ticks goes through flow control: ordered by event time when
        #: the loop has several (``merged``), else first come first served, a turn's worth
        self.merged = tuple(merged) or tuple(t for t in topics if t != ticks)
        self.merge = EventTimeMerge(
            self.merged,
            lag,
            max_idle_s=settings.flow_max_idle_ms / 1000,
            max_buffered=settings.flow_max_buffered,
            enabled=settings.flow_control and len(merged) > 1,
        )
        #: partition -> the inputs this loop stopped fetching (flow control holds too many)
        self._holding: dict[int, set[str]] = {}
        #: partitions flow control may have more records of to let go now (a turn handles
        #: at most max_batch records)
        self._ready: set[int] = set()
        self._records_in = {
            t: metrics.records_in.labels(self.join, t) for t in topics if t != ticks
        }
        self._flow_waiting = metrics.flow_waiting.labels(self.join)
        #: input topic -> its side's own tolerance of records from the future (a spec side's
        #: ``max_future_ms``; not listed: ETJ_MAX_FUTURE_MS)
        self.tolerance: dict[str, int] = dict(getattr(engine, "max_future_ms", {}))

    async def take(self) -> list[Batch]:
        """Every batch waiting; waits for one only when flow control has nothing more to let
        go now, and then at most until its next held wait times out. Flow control's timed-out
        waits are let go when the inbox wait times out (no wake-up records)."""
        if self._ready:  # flow control has records to let go: no waiting for more
            batches = self.inbox.take_nowait()
        else:
            batches = await self.inbox.take(self.merge.next_wait_s())
        prepare = getattr(self.engine, "prepare", None)
        if prepare is not None and batches:
            # what parsing them needs from outside, fetched before (the writer schemas of
            # their framed records, app.kafka.schema_registry): parsing stays synchronous, and
            # a registry that does not answer holds the batch here, whole (back pressure)
            await prepare(batches)
        return batches

    def release(self, batches: Sequence[Batch], generation: int) -> tuple[list[Any], list[Batch]]:
        """Parse ``batches`` into flow control; what it lets go in event-time order, up to
        :attr:`max_batch` records (the rest stays queued, in order, for the next turn), as
        ``(topic, record, parsed)``, and the batches of ticks."""
        merge = self.merge
        ticks: list[Batch] = []
        ready = self._ready
        for b in batches:
            if b.generation != generation:
                continue  # fetched before a rebalance: read again from the committed offset
            if b.topic == self.ticks:
                ticks.append(b)
                continue
            self._records_in[b.topic].inc(len(b.records))
            merge.offer_batch(
                b.topic,
                b.partition,
                parse_batch(
                    self.join, self.engine.parse, b, self.door, self.tolerance.get(b.topic)
                ),
                b.highwater,
            )
            ready.add(b.partition)
        forced = merge.forced
        budget = self.max_batch
        released: list[Any] = []
        for p in sorted(ready):
            items = merge.release(p, budget - len(released))
            released += items
            if len(released) < budget:
                ready.discard(p)  # all it could let go: wait for its lagging input, or more
        released += merge.poll()
        self._back_pressure(set(merge.partitions) if merge.partitions else set())
        if merge.forced > forced:
            metrics.flow_forced.labels(self.join).inc(merge.forced - forced)
        self._flow_waiting.set(merge.waiting())
        return released, ticks

    def _back_pressure(self, partitions: set[int]) -> None:
        """Stop fetching the inputs of a partition flow control holds too many records of,
        and fetch them again once it holds fewer (:meth:`EventTimeMerge.full`)."""
        consumer = cast("EtjConsumer", app.consumer)  # the app's transport makes etj's
        why = f"flow {self.join}"  # this loop's reason: a topic other loops read is held for
        for p in partitions:  # them too until this one lets it go
            full = set(self.merge.full(p))
            held = self._holding.get(p, set())
            for topic in full - held:
                consumer.hold(TP(topic, p), why)
            for topic in held - full:
                consumer.let_go(TP(topic, p), why)
            if full:
                self._holding[p] = full
            else:
                self._holding.pop(p, None)

    def drop(self) -> int:
        """Let go of what waits in the inbox and in flow control (not acked: read again from
        the committed offsets); how many records."""
        held = len(self.merge.reset())
        self._ready.clear()
        self._holding.clear()  # the rebalance resumes the partitions it assigns
        self._flow_waiting.set(0)
        return held + self.inbox.clear()


def lag(topic: str, partition: int, next_offset: int | None) -> bool:
    """Does the broker hold records of an input partition that has handed over nothing
    since the last reset? From the consumer's last fetch (its high water) against the
    committed offset. A partition not fetched yet since the assignment counts as lagging:
    its first fetch is on its way (at most ``ETJ_FLOW_MAX_IDLE_MS``; an empty partition
    answers with its high water and waits no more). Counted as not lagging, a backlog's
    first fetch of moods (a whole partition: hours of event time) was released before the
    recommendations were fetched, and 10,647 of 100,000 records went to etj-late."""
    tp = TP(topic, partition)
    try:
        highwater = app.consumer.highwater(tp)
    except Exception:
        return False  # no consumer (not started, or stopping): nothing to wait for
    if highwater is None:
        return True
    if next_offset is None:
        next_offset = committed_offset(app.consumer, tp) or 0
    return highwater > next_offset


def parse_batch(
    join: str, parse: Parse, b: Batch, judged: bool = True, tolerance: int | None = None
) -> list[tuple[int, int, Any]]:
    """``(event_time, offset, (topic, record, parsed))`` of a batch, for flow control:
    parsed, then through the door (:mod:`app.inputs.admission`: Kafka's partitioner, records from
    the future) unless not ``judged``; a record refused goes first, to the dead letters, and
    never moves stream time. ``tolerance``: the side's own ``max_future_ms`` (None:
    ETJ_MAX_FUTURE_MS); a record it admits that is not due yet is handed on as
    :class:`~app.inputs.admission.Early`, ordered by the time it is due."""
    topic = b.topic
    judge: Any = None
    now_ms = int(time.time() * 1000)
    max_future = settings.max_future_ms
    bound = "ETJ_MAX_FUTURE_MS"
    if tolerance is None:
        tolerance = max_future
    else:
        bound = f"the max_future_ms of {join}'s side on {topic}"
    early = tolerance > max_future
    if judged:
        try:
            partitions = app.consumer.topic_partitions(topic)
        except Exception:
            partitions = None  # no metadata yet: the partitioner is not checked
        judge = door(b.partition, partitions, now_ms, tolerance, settings.check_partitioner, bound)
    out = []
    for record in b.records:
        try:
            parsed, event_time = parse(
                topic, record.key, record.value, record.timestamp, record.headers
            )
        except InvalidRecord as exc:
            parsed, event_time = exc, -1  # goes first, to the dead letters
        except Exception as exc:  # a bug must not kill the worker nor lose the record
            log.exception(
                "join %s failed to parse %s[%s]@%s", join, topic, record.partition, record.offset
            )
            parsed, event_time = InvalidRecord(f"internal error: {exc!r}"), -1
        else:
            refused = None if judge is None else judge(record, event_time)
            if refused is not None:
                rule, reason = refused
                metrics.refused.labels(join, topic, rule).inc()
                parsed, event_time = InvalidRecord(reason), -1
            elif early:
                due = due_time(event_time, kafka_timestamp(record.timestamp), now_ms, max_future)
                if due < event_time:
                    parsed, event_time = Early(parsed, due), due
        out.append((event_time, record.offset, (topic, record, parsed)))
    return out

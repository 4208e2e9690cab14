"""etj's Faust consumer: input records go to their agent a fetch at a time; offsets are
committed by range. Registered as the transport's ``Consumer`` class (``EtjApp._new_transport``),
Faust's extension point for a driver's consumer, not a patch of Faust's class.

How, against upstream (faust-streaming 0.15.3, ``faust.transport.consumer.Consumer``; what
it fixes and when it can go: :class:`EtjConsumer`):

- ``_drain_messages`` turns every fetched record into a ``ConsumerMessage`` and awaits the
  conductor's callback for it (its lock, flow control, the producer buffer, an event and a queue
  put per record); the stream then hands it to the agent, one loop turn each. Here the records
  of an input partition of an etj loop go to that loop's :class:`~app.inputs.inbox.Inbox` as they came
  from aiokafka, one :class:`~app.inputs.inbox.Batch` per partition per fetch: to every loop
  that reads the topic (several joins may read one topic, each is handed every record). Every
  other record (table changelogs: recovery and standbys) takes upstream's path, record by
  record, delivered in place when the callback takes no wait (:mod:`app.compat.eager_delivery`).
- Offsets are acked per message (``Consumer.ack``: a lock, a list, an index set) and the
  commit finds the first run of consecutive acked offsets, treating a missing offset at the
  head as a log gap (faust-streaming#606: it commits past a record still being processed).
  Here a loop acks a *range* once the broker has its outputs (:meth:`EtjConsumer.ack_range`),
  and the commit takes the end of the contiguous acked range: an offset is committed only if
  every record before it was handled and its outputs are durable, or the log does not hold it
  (aiokafka read past it: a compacted record, a transaction marker; :mod:`app.compat.log_gaps`).
  A topic read by several loops is committed up to the *least* of their acked ends: an offset
  only once every join reading it is done with every record before it (:meth:`ack_range`).
- Back pressure holds a partition for every reader: fetching stops while any reader's inbox or
  flow control holds too many of its records (:meth:`hold`, one reason per reader), so one
  reader's backlog bounds what every other one is handed, and memory stays bounded.
- No hand-over is ever silent: a partition's batches must follow each other (the next batch
  starts where the last one ended, or after offsets the log does not hold). A batch that
  starts later — records fetched and not handed over, for whatever reason — is not delivered,
  and the partition is read again from the end of the last batch (:meth:`_follows`). A batch
  fetched in an older group generation is dropped: the rebalance seeks every partition it keeps
  to its committed offset, so those records come again.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from typing import Any, cast

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types import TP
from mode import Service

from app.compat import log_gaps
from app.compat.consumer_thread import EtjConsumerThread
from app.compat.eager_delivery import resume, step
from app.compat.producer import EtjProducer
from app.compat.upstream import replaces
from app.inputs.inbox import Batch, Inbox

__all__ = ["EtjConsumer", "EtjTransport", "extend", "follows", "least_end"]

log = logging.getLogger(__name__)


def follows(tp: Any, expected: int | None, first: int) -> bool:
    """Does a batch of ``tp`` starting at ``first`` follow a hand-over that ended at
    ``expected`` (None: nothing to follow)? It does when it starts there or before (a part read
    again after a seek back), or after offsets the log does not hold
    (:mod:`app.compat.log_gaps`)."""
    if expected is None or first <= expected:
        return True
    absent = log_gaps.skipped_within(tp, expected, first)
    return sum(b - a for a, b in absent) == first - expected


def least_end(ends: Iterable[int | None]) -> int | None:
    """What a partition read by several loops may be committed up to: the least of their
    acked ends (None when one of them is unknown: nothing acked, nothing committed)."""
    least: int | None = None
    for end in ends:
        if end is None:
            return None
        if least is None or end < least:
            least = end
    return least


def extend(tp: Any, acked: int | None, first: int, end: int) -> int:
    """The end of ``tp``'s acked range once ``first`` .. ``end - 1`` are acked too (``acked``:
    its end so far, or the committed offset; None: nothing known). A range after a hole — an
    offset never acked that the log holds — does not extend it: the commit waits at the hole."""
    if acked is None:
        return end
    if first > acked and not follows(tp, acked, first):
        return acked
    return max(acked, end)


@replaces(
    ("faust.transport.consumer:ThreadDelegateConsumer.__init__", "eb97deeb86ee"),
    ("faust.transport.drivers.aiokafka:Consumer._new_consumer_thread", "8fd0d41b1514"),
    ("faust.transport.consumer:Consumer._drain_messages", "8f35dd7a1114"),
    ("faust.transport.consumer:Consumer._filter_tps_with_pending_acks", "cccdca32d241"),
    ("faust.transport.consumer:Consumer._new_offset", "2b29afe4dd9a"),
    ("faust.transport.consumer:Consumer.on_partitions_revoked", "652177e770ee"),
    ("faust.transport.consumer:Consumer.on_partitions_assigned", "c07feb1175f7"),
)
class EtjConsumer(aiokafka_driver.Consumer):
    """Input records go to their agent a fetch at a time, and offsets are committed by range.

    Upstream: ``Consumer._drain_messages`` turns every fetched record into a
    ``ConsumerMessage`` and awaits the conductor's callback for it (a lock, flow control, the
    producer buffer, an event and a queue put per record), and the stream hands it to the
    agent one loop turn each; offsets are acked per message and the commit takes the first run
    of consecutive acked offsets, treating a missing offset at the head as a log gap
    (faust-streaming#606: it commits past a record still being processed).

    Symptom: 8,039 records/s a worker with producer batching, where Quix Streams did 40,008/s
    on the same broker (the per-record path, docs/contributing/performance-log.md); and
    records committed that were never handled (findings.md).

    Here (module doc): the records of an input partition go to the inbox of every loop that
    reads it, one batch per fetch (``_drain_messages``), a loop acks a range once the broker
    has its outputs, and a partition is committed up to what every reader acked
    (:meth:`ack_range`, ``_new_offset``, ``_filter_tps_with_pending_acks``), a batch that does
    not follow the last one is read again, and a rebalance forgets what was handed over
    (``on_partitions_revoked``/``_assigned``). The thread is etj's
    (``_new_consumer_thread``: :mod:`app.compat.consumer_thread`).

    Test: tests/unit/test_consumer_handover.py::test_a_batch_that_skips_records_is_not_handed_over_and_they_are_read_again,
    tests/unit/test_shared_topics.py (several readers: the fan-out, the least acked end)

    Remove when: Faust hands an agent a partition's records in batches and commits by range.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: input topic -> the inboxes of the loops that read it (each is handed every batch)
        self.inboxes: dict[str, list[Inbox]] = {}
        #: tp -> reader (its inbox's name) -> end of the contiguous range it acked (handled,
        #: outputs durable)
        self._acked_by: dict[TP, dict[str, int]] = {}
        #: tp -> the least of its readers' acked ends: what to commit
        self._acked_end: dict[TP, int] = {}
        #: tp -> the offset the next batch handed over must start at (None: not known yet)
        self._next: dict[TP, int] = {}
        #: tp -> why this consumer stopped fetching it, per reader: "inbox <name>" (that
        #: loop's inbox is full), "flow <join>" (that loop's flow control holds too many of its
        #: records for a lagging input); fetched again once no reason is left
        self._held_back: dict[TP, set[str]] = {}
        super().__init__(*args, **kwargs)

    def _new_consumer_thread(self) -> EtjConsumerThread:
        """Faust's hook for a driver's consumer thread: etj's
        (:mod:`app.compat.consumer_thread`)."""
        return EtjConsumerThread(self, loop=self.loop, beacon=self.beacon)

    # --- routing ---------------------------------------------------------------------------
    def route(self, inbox: Inbox) -> None:
        """Hand the records of ``inbox.topics`` to ``inbox`` from now on, beside the other
        readers of each topic (again for the same inbox: nothing changes, an agent restarted).
        Readers of one topic are told apart by name (their acks, their holds)."""
        for topic in inbox.topics:
            readers = self.inboxes.setdefault(topic, [])
            if inbox in readers:
                continue
            if any(r.name == inbox.name for r in readers):
                raise ValueError(f"two readers of {topic} are named {inbox.name!r}")
            readers.append(inbox)
        why = f"inbox {inbox.name}"
        # Faust's TP: its active set holds those
        inbox.on_drained = lambda topic, partition: self.let_go(TP(topic, partition), why)

    def hold(self, tp: TP, why: str) -> None:
        """Stop fetching ``tp`` (back pressure) until :meth:`let_go` is called for every
        ``why`` it was held for: a partition several loops read is held for all of them while
        one of them has too many of its records (the others wait; none is handed more than its
        bound)."""
        self._held_back.setdefault(tp, set()).add(why)
        self._get_active_partitions().discard(tp)

    def let_go(self, tp: TP, why: str) -> None:
        whys = self._held_back.get(tp)
        if whys is None or why not in whys:
            return
        whys.discard(why)
        if not whys:
            del self._held_back[tp]
            if tp in self.assignment() and tp not in self._paused_partitions:
                self._get_active_partitions().add(tp)

    # --- the fetch loop --------------------------------------------------------------------
    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - a service loop
        consumer_should_stop = cast(Service, self)._stopped.is_set
        fetcher_should_stop = cast(Service, fetcher)._stopped.is_set
        set_flag, unset_flag = self.diag.set_flag, self.diag.unset_flag
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                records, _ = await self._wait_next_records(1.0)
                await self.sleep(0)
                if records and not self.should_stop:
                    await self._hand_over(records)
                unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)

    async def _hand_over(self, records: Mapping[TP, list[Any]]) -> None:
        """One fetch: input partitions as batches, every other record one by one."""
        app = self.app
        generation = app.consumer_generation_id
        inboxes = self.inboxes
        others: list[tuple[TP, list[Any]]] = []
        for tp, recs in records.items():
            if not recs:
                continue
            readers = inboxes.get(tp.topic)
            if not readers:
                others.append((tp, recs))
                continue
            if not self.flow_active or app.consumer_generation_id != generation:
                continue  # a rebalance began: it seeks tp to its committed offset
            first = recs[0].offset
            if not self._follows(tp, first):
                continue
            self._next[tp] = recs[-1].offset + 1
            highwater = self.highwater(tp)
            app.monitor.track_tp_end_offset(tp, highwater)
            batch = Batch(tp.topic, tp.partition, recs, highwater, generation)
            for inbox in readers:  # one batch, read only, for every reader
                if inbox.put(batch):
                    self.hold(tp, f"inbox {inbox.name}")
        for tp, recs in others:
            await self._deliver_each(tp, recs)

    def _follows(self, tp: TP, first: int) -> bool:
        """Does a batch starting at ``first`` follow what was handed over of ``tp``? If not,
        ``tp`` is read again from where it should have started (module doc)."""
        expected = self._next.get(tp)
        if expected is None:
            expected = self._committed_offset.get(tp)  # None: never committed, the seek to the
        if follows(tp, expected, first):  # log's start is trusted
            return True
        log.warning(
            "input %s[%s]: a fetch starts at %d, but %d is the next offset to hand "
            "over; reading again from %d",
            tp.topic,
            tp.partition,
            first,
            expected,
            expected,
        )
        assert expected is not None  # follows() is true when there is nothing to follow
        self._next[tp] = expected
        self._thread.seek(tp, expected)  # aiokafka drops what it fetched from elsewhere
        return False

    def rewound(self, tp: TP, offset: int) -> None:
        """``tp`` was seeked to ``offset`` (its next batch starts there)."""
        self._next[tp] = offset

    async def _deliver_each(self, tp: TP, recs: list[Any]) -> None:
        """Upstream's per-record delivery (changelogs), each record delivered in place when the
        callback takes no wait (:mod:`app.compat.eager_delivery`)."""
        # Faust's ConsumerCallback says Awaitable; it is the conductor's on_message, a coroutine
        # function, and step() drives the coroutine itself
        callback = cast(Callable[[Any], Coroutine[Any, Any, Any]], self.callback)
        read_offset = self._read_offset
        to_message = self._to_message
        loop = asyncio.get_running_loop()
        for n, record in enumerate(recs):
            if n and not n % 100:
                await asyncio.sleep(0)
            if not self.flow_active:
                return
            offset = record.offset
            r_offset = read_offset[tp]
            if r_offset is not None and offset < r_offset:
                continue  # upstream: below the read offset, dropped (a seek back follows)
            message = to_message(tp, record)
            context = contextvars.copy_context()
            coro = callback(message)
            done, yielded = step(coro, context)
            if not done:
                await self.wait_first(
                    loop.create_task(resume(coro, yielded), context=context),
                    self.suspend_flow.wait(),
                )
            read_offset[tp] = offset

    # --- acks and commits ------------------------------------------------------------------
    def ack_range(self, tp: TP, first: int, end: int, reader: str) -> None:
        """Records ``first`` .. ``end - 1`` of ``tp`` are handled by ``reader`` (its inbox's
        name) and their outputs durable. What is committed is the least acked end of every
        reader of the topic (a reader with nothing acked: the committed offset; unknown, with
        nothing committed: nothing is): no offset is committed before every join reading it
        is done with every record before it."""
        committed = self._committed_offset.get(tp)
        ends = self._acked_by.setdefault(tp, {})
        ends[reader] = extend(tp, ends.get(reader, committed), first, end)
        readers = {*ends, *(inbox.name for inbox in self.inboxes.get(tp.topic, ()))}
        least = least_end(ends.get(r, committed) for r in readers)
        if least is None:
            self._acked_end.pop(tp, None)
        else:
            self._acked_end[tp] = least

    def acked_end(self, tp: TP) -> int | None:
        return self._acked_end.get(tp)

    def _filter_tps_with_pending_acks(self, topics: Any = None) -> Iterator[TP]:
        for tp in {*self._acked, *self._acked_end}:
            if topics is None or tp in topics or tp.topic in topics:
                yield tp

    def _new_offset(self, tp: TP) -> int | None:
        end = self._acked_end.get(tp)
        if end is None:
            return super()._new_offset(tp)
        return end

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        for tp in revoked:
            self._acked_end.pop(tp, None)
            self._acked_by.pop(tp, None)
            self._next.pop(tp, None)
            self._held_back.pop(tp, None)
        await super().on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        # kept partitions are seeked to their committed offsets: the hand-over restarts there,
        # and what this worker acked before the rebalance was committed by its revoke (another
        # worker may have moved them on since: an old acked range must not be committed)
        self._next.clear()
        self._acked_end.clear()
        self._acked_by.clear()
        self._held_back.clear()
        for inbox in {inbox for readers in self.inboxes.values() for inbox in readers}:
            inbox.clear()  # every reader reads again from the committed offsets
        await super().on_partitions_assigned(assigned, generation_id)

    # --- what the stall guard and the views read -------------------------------------------
    def committed(self, tp: TP) -> int | None:
        return self._committed_offset.get(tp)

    def next_offset(self, tp: TP) -> int | None:
        """The offset the next batch of ``tp`` must start at (None: not known yet)."""
        return self._next.get(tp)

    def fetching(self, tp: TP) -> bool:
        """Is ``tp`` among the partitions Faust asks aiokafka records of (not paused, not
        held back)?"""
        return tp in self._get_active_partitions()

    def held_back(self, tp: TP) -> bool:
        """Did the hand-over stop fetching ``tp`` because a reader's inbox or flow control
        holds too many of its records?"""
        return tp in self._held_back

    def input_partitions(self) -> Iterable[TP]:
        return [tp for tp in self.assignment() if tp.topic in self.inboxes]


class EtjTransport(aiokafka_driver.Transport):
    """Faust's aiokafka transport with etj's consumer and producer (``EtjApp._new_transport``)."""

    Consumer = EtjConsumer
    Producer = EtjProducer

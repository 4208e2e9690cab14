"""Faust's aiokafka consumer thread (``AIOKafkaConsumerThread``): etj's subclass.

Faust's consumer runs its aiokafka consumer through this thread class: it creates the aiokafka
consumer, asks it for records and end offsets, and seeks it after a rebalance. etj changes four
of its methods; :class:`EtjConsumerThread` is created by etj's consumer
(:meth:`app.compat.consumer.EtjConsumer._new_consumer_thread`, Faust's own hook for a driver's
thread), so upstream's class is left as it is. Each override calls upstream's method by name
(``AIOKafkaConsumerThread.x(self, ...)``), so the part it adds is all that is written here.

Settings read from ``app.etj``: ``consumer_fetch_max_wait_ms``, ``end_offsets_by_fetch``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from aiokafka.protocol.fetch import FetchRequest
from aiokafka.structs import TopicPartition
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from app.compat.upstream import replaces

__all__ = ["ActiveView", "EtjConsumerThread", "fetched_ends", "is_input"]

log = logging.getLogger(__name__)


def _setting(thread: Any, name: str, default: Any = None) -> Any:
    return getattr(getattr(thread.app, "etj", None), name, default)


class ActiveView:
    """Faust's live set of active partitions, never "empty" to aiokafka
    (:meth:`EtjConsumerThread._fetch_records`)."""

    __slots__ = ("tps",)

    def __init__(self, tps: Any) -> None:
        self.tps = tps

    def __bool__(self) -> bool:
        return True  # aiokafka reads an empty set as "every partition"

    def __contains__(self, tp: Any) -> bool:
        return tp in self.tps

    def __iter__(self) -> Any:
        return iter(self.tps)

    def __len__(self) -> int:
        return len(self.tps)


def is_input(app: Any, tp: Any) -> bool:
    """An input partition of the agents: not a table changelog, not Faust's leader topic."""
    return tp.topic not in app.tables.changelog_topics and "__assignor" not in tp.topic


async def seek_to_start(consumer: Any, tp: Any, start: Any) -> None:
    """Seek a partition with no committed offset to a spec's ``start`` (``latest``, or epoch ms:
    the first offset whose timestamp is at or after it, by the broker's offsets-for-times; none:
    the end) and commit that offset, so that a restart resumes there instead of starting
    again from a later end (records produced while the worker was down would be skipped)."""
    if start == "latest":  # the end a Fetch reports too: tansu's ListOffsets under-reports
        offset = (await fetched_ends(consumer._client, await consumer.end_offsets([tp])))[tp]
    else:
        found = (await consumer.offsets_for_times({tp: int(start)})).get(tp)
        offset = found.offset if found is not None else (await consumer.end_offsets([tp]))[tp]
    consumer.seek(tp, offset)
    await consumer.commit({tp: offset})
    log.info(
        "%s[%s]: no committed offset, starting at %s (start %s)",
        tp.topic,
        tp.partition,
        offset,
        start,
    )


async def fetched_ends(client: Any, listed: Mapping[Any, int]) -> dict[Any, int]:
    """``listed`` end offsets, each raised to the high watermark a Fetch of it reports.

    A partition whose leader is unknown or whose Fetch fails keeps its listed end (the
    answer without this patch)."""
    by_node: dict[int, list[Any]] = defaultdict(list)
    for tp in listed:
        node = client.cluster.leader_for_partition(TopicPartition(tp.topic, tp.partition))
        if node is not None and node >= 0:
            by_node[node].append(tp)
    ends = dict(listed)
    for node, tps in by_node.items():
        by_topic: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append((tp.partition, max(listed[tp] - 1, 0), 1))
        # a 1 ms wait, not 0: tansu answers a Fetch with no wait with no partitions at all
        request = FetchRequest(1, 0, 1, 0, list(by_topic.items()))
        try:
            response = await client.send(node, request)
        except Exception as exc:  # the listed ends stand, as without this patch
            log.warning(
                "end offsets: a Fetch to node %s failed (%r); the ListOffsets "
                "answers stand for %d partitions",
                node,
                exc,
                len(tps),
            )
            continue
        want = {(tp.topic, tp.partition): tp for tp in tps}
        for topic, partitions in response.topics:
            for partition, error_code, highwater, *_ in partitions:
                tp = want.get((topic, partition))
                if tp is not None and error_code == 0 and highwater > ends[tp]:
                    ends[tp] = highwater
    return ends


class EtjConsumerThread(AIOKafkaConsumerThread):
    """Faust's consumer thread with etj's four changes (module doc)."""

    @replaces(
        "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._create_worker_consumer",
        "c179c0bdb975",
    )
    def _create_worker_consumer(self, transport: Any) -> Any:
        """How long the worker's consumer lets the broker hold a fetch is a setting
        (``ETJ_CONSUMER_FETCH_MAX_WAIT_MS``).

        Upstream: Faust creates its worker consumer with ``fetch_max_wait_ms=1500`` hard-coded
        and no setting to change it. Kafka answers a fetch as soon as one record is there, so
        that is only an idle-poll period.

        Symptom: the bundled tansu broker holds every fetch that finds nothing for the full
        wait, even when a record arrives meanwhile: a record produced while a fetch waited
        reached the consumer ~600 ms later with 1500 ms, ~3 ms with 5 ms. On tansu that wait
        is the floor of every correction's latency, so the local set-up lowers it to 100 ms
        (not lower: see findings.md, "fetch wait"); unset keeps Faust's value.

        Test: tests/unit/test_consumer_thread.py::test_the_fetch_wait_is_the_setting (and
        bench.correction_latency: the latency floor moves with the setting).

        Remove when: Faust exposes the fetch wait as a setting and ``app.faust_app`` passes it.
        """
        consumer = AIOKafkaConsumerThread._create_worker_consumer(self, transport)
        wait_ms = _setting(self, "consumer_fetch_max_wait_ms")
        if wait_ms is not None:
            consumer._fetch_max_wait_ms = wait_ms  # read by the fetcher created in start()
        return consumer

    @replaces(
        "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._fetch_records", "9e7369fc572d"
    )
    async def _fetch_records(
        self,
        consumer: Any,
        active_partitions: Any,
        timeout: float | None = None,
        max_records: int | None = None,
    ) -> Any:
        """Records of a partition Faust has paused stay in aiokafka: an empty set of active
        partitions means none, not all.

        Upstream: Faust pauses a partition only in its own bookkeeping and hands aiokafka's
        ``Fetcher.fetched_records`` its *live* set of active partitions; aiokafka skips a
        partition only ``if partitions and tp not in partitions``, so an empty set means every
        partition. During a rebalance Faust pauses every partition: a fetch waiting then hands
        over what aiokafka prefetched for all of them, moves their positions past it, and
        Faust's ``getmany`` drops those records as records of paused partitions.

        Symptom: nothing reads those records again unless a later seek does. Seen twice
        (findings.md, "paused fetch"): a new standby lost changelog offsets 0..56 and its
        worker later took the partition over with rows missing; a worker taking over after a
        graceful stop had input records 437..1529 dropped, and the partition waited for the
        stall guard.

        Here aiokafka gets a view of the same live set that is never empty
        (:class:`ActiveView`); Faust's client-only mode (no set: every partition) is left
        alone. A partition paused between aiokafka's drain and Faust's hand-out can still
        lose records that way; the hand-over's follow rule and the stall guard stay.

        Test: tests/unit/test_paused_fetch.py::test_with_every_partition_paused_nothing_is_handed_over_and_positions_stay

        Remove when: Faust passes aiokafka a set it does not empty, or aiokafka stops reading
        an empty set as every partition.
        """
        if active_partitions is not None:
            active_partitions = ActiveView(active_partitions)
        return await AIOKafkaConsumerThread._fetch_records(
            self, consumer, active_partitions, timeout=timeout, max_records=max_records
        )

    @replaces("faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._highwaters", "829699ec62b7")
    async def _highwaters(self, partitions: Any) -> Mapping[Any, int]:
        """End offsets from a Fetch as well as ListOffsets (``ETJ_END_OFFSETS_BY_FETCH``).

        Upstream: Faust's table recovery reads each changelog partition up to its end offset,
        which it asks with ListOffsets (``_highwaters`` -> aiokafka's ``end_offsets``); so do
        the snapshot checks.

        Symptom: tansu 0.6.0 answers ListOffsets with the first offset of the partition's
        newest batch + 1 (a batch of 10 records at offsets 1–10 gives 2; a Fetch says 11).
        With producer batching a recovered table silently lacked its last updates (19,999 of
        20,000), and a RocksDB table whose stored offset is past that end failed with
        ``ConsistencyError``.

        Here, when the setting is on: after ListOffsets, one Fetch per leader (at each listed
        end − 1, one byte, a 1 ms wait), and each partition's end is the larger of the two
        answers (:func:`fetched_ends`). A broker with exact end offsets (Apache Kafka,
        Redpanda) gives the same answer from both, for one extra request per recovery: the
        setting is off by default.

        Test: tests/broker/test_end_offsets.py::test_a_fresh_worker_recovers_every_row_a_batching_worker_wrote

        Remove when: tansu's ListOffsets counts the records of the newest batch.
        """
        listed = await AIOKafkaConsumerThread._highwaters(self, partitions)
        if not _setting(self, "end_offsets_by_fetch", False):
            return listed
        if self.consumer.in_transaction:  # last stable offsets, from the fetches already
            return listed
        return await fetched_ends(self._ensure_consumer()._client, listed)

    @replaces(
        "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.seek_to_committed", "43907fc11636"
    )
    async def seek_to_committed(self) -> dict[Any, Any]:
        """A partition with no committed offset is read from its start, not from wherever its
        fetch position was.

        Upstream: aiokafka's ``seek_to_committed`` seeks only to offsets > 0, so after a
        rebalance a partition with no committed offset keeps its old position.

        Symptom: past records the previous generation fetched but never handed to its agent
        (a mood missing from the history, a recommendation with no revision; the two-worker
        kill tests, about one run in four without this and the recovery's seek-first fix,
        :meth:`app.compat.recovery.EtjRecovery.on_recovery_completed`).

        Here every assigned input partition is seeked to its committed offset, or to offset 0
        when it has none (below the log start, the reset policy takes it to the earliest);
        changelog partitions are left to the table recovery. A topic a join spec starts from
        ``latest`` or a time (``app.input_starts``, docs/joins/declarative.md) is seeked there
        instead, and that offset committed (:func:`seek_to_start`): a committed 0 is then a
        position, not "none".

        Test: tests/broker/test_faults_kill.py::test_two_workers_one_killed_then_it_comes_back_is_exact

        Remove when: aiokafka (or Faust) seeks uncommitted partitions to their start.
        """
        consumer = self._ensure_consumer()
        app = self.app

        starts = getattr(app, "input_starts", {})

        async def seek() -> dict[Any, Any]:
            tps = [tp for tp in consumer.assignment() if is_input(app, tp)]
            committed = await consumer.seek_to_committed(*tps) if tps else {}
            for tp, offset in committed.items():
                if not offset or offset <= 0:
                    start = starts.get(tp.topic, "earliest")
                    # a committed 0 (a start committed on an empty partition) is a position
                    if start == "earliest" or offset == 0:
                        consumer.seek(tp, 0)
                    else:
                        await seek_to_start(consumer, tp, start)
            return committed

        return await self.call_thread(seek)

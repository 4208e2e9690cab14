"""End offsets from a Fetch as well as ListOffsets (``ETJ_END_OFFSETS_BY_FETCH``), for brokers
whose ListOffsets under-reports: the bundled tansu broker with producer batching.

Upstream: Faust's table recovery reads each changelog partition up to its end offset, which it
asks with ListOffsets (``AIOKafkaConsumerThread._highwaters`` -> aiokafka's ``end_offsets``);
so do the snapshot checks (:mod:`app.compat.snapshot_restore`). tansu 0.6.0 answers ListOffsets
with the first offset of the partition's newest batch + 1: a batch of 10 records at offsets
1–10 gives 2, where a Fetch of the same partition reports the true high watermark, 11 (measured,
``tests/broker/test_end_offsets.py``). Symptom: with producer batching, a recovered table
silently lacks its last updates (19,999 of 20,000), and a RocksDB table whose stored offset is
past that end fails with ``ConsistencyError``. So the bundled broker ran with one-record
producer batches (``ETJ_PRODUCER_MAX_BATCH_SIZE=1``), one changelog row per request per
partition: under load its round trips made that the limit of the 10-minute chaos run.

Here, when the setting is on: after ListOffsets, one Fetch per leader (offsets at each listed
end − 1, at most one byte asked per partition, a 1 ms wait) and each partition's end is the larger
of the two answers. A broker that reports exact end offsets (Apache Kafka, Redpanda) gives the
same answer from both, for one extra request per recovery; so the setting is off by default.

Test: tests/broker/test_end_offsets.py (the quirk, the patched answer, and a fresh worker that
recovers every row a batching worker wrote). Remove when tansu's ListOffsets counts the records
of the newest batch.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Mapping

from aiokafka.protocol.fetch import FetchRequest
from aiokafka.structs import TopicPartition
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

log = logging.getLogger(__name__)

_original = AIOKafkaConsumerThread._highwaters


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
            log.warning("end offsets: a Fetch to node %s failed (%r); the ListOffsets "
                        "answers stand for %d partitions", node, exc, len(tps))
            continue
        want = {(tp.topic, tp.partition): tp for tp in tps}
        for topic, partitions in response.topics:
            for partition, error_code, highwater, *_ in partitions:
                tp = want.get((topic, partition))
                if tp is not None and error_code == 0 and highwater > ends[tp]:
                    ends[tp] = highwater
    return ends


def install(enabled: bool) -> None:
    """Make Faust's end offsets (``consumer.highwaters``) the larger of ListOffsets and Fetch."""

    async def highwaters(self: AIOKafkaConsumerThread, partitions: Any) -> Mapping[Any, int]:
        listed = await _original(self, partitions)
        if self.consumer.in_transaction:  # last stable offsets, from the fetches already
            return listed
        return await fetched_ends(self._ensure_consumer()._client, listed)

    AIOKafkaConsumerThread._highwaters = highwaters if enabled else _original  # type: ignore

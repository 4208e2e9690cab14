"""A batch's changelog: one row per key written, its last value (app.compat.write_behind).

Several records delivered at once form one batch of the durable loop; the stream clock and the
consultant's joins row are rewritten by each of them, yet the changelog gets each key once,
with exactly what the table holds at the end of the batch, on the partition of the records.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from faust.types import Message

from app.agents.durable import loops
from app.faust_app import app, settings


async def deliver_batch(agent: Any, records: list[tuple[str, str, dict[str, Any]]],
                        partition: int) -> None:
    """Put all ``records`` on the agent's channel before it runs: the loop takes them as one
    batch (its queue is not empty until the last), then wait until the batch is delivered."""
    channel = agent.stream().channel
    for offset, (topic, key, value) in enumerate(records):
        message = Message(topic=topic, partition=partition, offset=10_000 + offset,
                          timestamp=time.time(), timestamp_type=0, headers=None,
                          key=key.encode(), value=json.dumps(value).encode(), checksum=b"",
                          serialized_key_size=0, serialized_value_size=0,
                          generation_id=app.consumer_generation_id)
        await channel.put(await channel.decode(message))
    for _ in range(1_000):
        await asyncio.sleep(0)
        if channel.queue.empty() and not any(loop.in_flight for loop in loops):
            break


def rows(sent: Any, table: Any) -> list[tuple[int | None, Any, Any]]:
    """(partition, key, value) of the changelog rows of ``table``, decoded."""
    name = table.changelog_topic.get_topic_name()
    return [(p, json.loads(k), None if v is None else json.loads(v))
            for t, p, k, v in sent.changelog if t == name]


async def test_one_batch_writes_each_key_once_with_its_last_value(join_harness):
    async with join_harness("moods") as h:
        t = h.tables
        await deliver_batch(h.agent, [
            (settings.moods_topic, "ann", {"name": "ann", "mood": "calm", "event_time": 10}),
            (settings.events_topic, "ann", {"consultant": "ann", "recommendation": "tea",
                                            "event_time": 20, "id": "a"}),
            (settings.events_topic, "ann", {"consultant": "ann", "recommendation": "nap",
                                            "event_time": 30, "id": "b"}),
            (settings.events_topic, "ann", {"consultant": "ann", "recommendation": "run",
                                            "event_time": 40, "id": "c"}),
        ], partition=2)
        # 3 revisions, and per table one row: each written key once, what the table holds
        assert len(h.outputs()) == 3
        assert rows(h.sent, t.clock) == [(2, 2, 40)]
        assert t.clock[2] == 40
        assert rows(h.sent, t.joins) == [(2, "ann", t.joins["ann"])]
        assert sorted(t.joins["ann"]) == ["a", "b", "c"]
        assert rows(h.sent, t.history) == [(2, "ann", [[10, "calm"]])]
        assert rows(h.sent, t.index) == [(2, 2, ["ann"])]
        assert len(h.sent.changelog) == 4  # 4 input records -> 4 rows (not 4 per record)


async def test_a_key_deleted_in_the_batch_sends_a_tombstone(join_harness):
    async with join_harness("movies") as h:
        t = h.tables
        movie = {"movie_id": "m1", "title": "Alien", "event_time": 1_000}
        rating = {"id": "r1", "movie_id": "m1", "user_id": "u7", "rating": 4.0,
                  "event_time": 2_000}
        await deliver_batch(h.agent, [
            (h.spec.dimension.topic, "m1", movie), (h.spec.events.topic, "m1", rating)],
            partition=0)
        expiry = rows_raw(h.sent, t.index)  # the rating's join, in the expiry index
        assert len(expiry) == 1 and expiry[0][2] is not None
        h.sent.changelog.clear()
        # far later in event time: the tick purges the rating's join -> tombstones
        late = {"movie_id": "m1", "title": "Alien 2", "event_time": 10 ** 12}
        await deliver_batch(h.agent, [(h.spec.dimension.topic, "m1", late)], partition=0)
        await h.tick(0)
        purged = rows_raw(h.sent, t.index)
        assert purged and all(v is None for _, _, v in purged)
        assert all(t.index.get(k) is None for _, k, _ in purged)


def rows_raw(sent: Any, table: Any) -> list[tuple[int | None, Any, Any]]:
    name = table.changelog_topic.get_topic_name()
    return [(p, k, v) for t, p, k, v in sent.changelog if t == name]

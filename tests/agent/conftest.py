"""The agent tier's one harness: an agent's loop fed batches by hand, every send captured,
tables cleared. No broker, no consumer: fast, but no substitute for the broker tests.

``deliver`` hands one record to a loop as a batch of one (as the consumer would hand a fetch)
and waits until the loop has delivered it (changelog, outputs, acks); ``captured`` replaces the
producer path (:func:`app.outputs.producer_batches.send_records`) so nothing needs a broker; ``join_harness``
drives any join spec's engine; the car tests build on ``deliver`` too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import namedtuple
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from unittest import mock

import pytest

from app.agents.event_join import JoinEngine, engines
from app.faust_app import app
from app.inputs.inbox import Batch
from app.joins.keys import join_range, split_join_key
from app.loop import pipeline
from app.loop.durable import DurableLoop, loops
from app.outputs import delivery
from app.outputs.producer_batches import Sent as Delivery
from app.state.range_scan import scan

#: what the consumer hands a loop: aiokafka's ConsumerRecord, the fields the loop reads
Record = namedtuple("Record", "topic partition offset key value timestamp headers", defaults=((),))


class Sent(list):
    """(topic, key, value) of every output send, in order; ``changelog``: the same for every
    changelog row a loop's overlays hand to the producer (app.state.overlay)."""

    def __init__(self) -> None:
        super().__init__()
        self.changelog: list[tuple[str, int | None, Any, Any]] = []  # (topic, partition, k, v)
        self.headers: list[tuple[str, Any, Any]] = []  # (topic, key, headers) of those with any


_offsets = itertools.count()


async def deliver(
    loop: DurableLoop,
    topic: str,
    key: str | bytes | None,
    value: Any,
    partition: int = 0,
    offset: int | None = None,
    timestamp: int | None = None,
) -> None:
    """Hand one record to ``loop`` (a batch of one) and wait until it is delivered.
    ``offset``: the record's (a re-delivery: the offset it had); default, a new one;
    ``timestamp``: its Kafka timestamp (default: now; a tombstone's time)."""
    raw = value if isinstance(value, (bytes, type(None))) else json.dumps(value).encode()
    offset = next(_offsets) if offset is None else offset
    record = Record(
        topic,
        partition,
        offset,
        key.encode() if isinstance(key, str) else key,
        raw,
        int(time.time() * 1000) if timestamp is None else timestamp,
    )
    await handle(loop, [Batch(topic, partition, [record], None, app.consumer_generation_id)])


async def handle(loop: DurableLoop, batches: Sequence[Batch]) -> None:
    """What one turn of ``loop.run`` does with ``batches``, then wait until it is delivered."""
    if loop.pipeline.queue is None:
        loop.pipeline.start()
    unit = loop.handle(batches)
    if unit is not None:
        await loop.pipeline.hand_over(unit)
    for _ in range(1000):
        failed = [
            t
            for t in loop.pipeline.tasks.values()
            if t is not None and t.done() and not t.cancelled() and t.exception() is not None
        ]
        if not loop.in_flight or failed:  # a failure: the worker would have failed stop
            break
        await asyncio.sleep(0)
    assert not loop.in_flight or failed, loop.describe()


@contextmanager
def captured() -> Iterator[Sent]:
    """Every record the loops produce (:func:`app.outputs.producer_batches.send_records`: outputs and
    changelog rows) recorded instead of produced, each "in the broker" at once."""
    app.finalize()
    sent = Sent()

    async def fake_send_records(
        app_: Any, records: Any, *, refusable: bool = False, on_sent: Any = None
    ) -> Delivery:
        out = Delivery()
        for i, (topic, partition, key, value, *rest) in enumerate(records):  # rest: a
            if topic.endswith("-changelog"):  # hop's timestamp and headers, or a delete's
                sent.changelog.append((topic, partition, key, value))
            else:
                sent.append((topic, key, value))
                if rest and rest[1]:
                    sent.headers.append((topic, key, rest[1]))
            done: asyncio.Future = asyncio.get_running_loop().create_future()
            done.set_result(None)
            out.futures.append((done, [i]))
        return out

    async def fake_send_direct(
        app_: Any, topic: str, key: Any, value: Any, partition: int | None = None, **kw: Any
    ) -> asyncio.Future:
        sent.append((topic, key, value))
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    with (
        mock.patch.object(pipeline, "send_records", fake_send_records),
        mock.patch.object(delivery, "send_direct", fake_send_direct),
    ):
        try:
            yield sent
        finally:
            for loop in loops:
                loop.pipeline.stop()


def outputs(sent: Sent, topic: str) -> list[Any]:
    """The values sent to ``topic``, decoded (None: a tombstone)."""
    return [None if v is None else json.loads(v) for t, _, v in sent if t == topic]


class JoinHarness:
    """Puts messages on one engine's topics and records every send."""

    def __init__(self, engine: JoinEngine, sent: Sent) -> None:
        self.engine, self.loop, self.sent = engine, engine.loop, sent
        self.spec, self.tables = engine.spec, engine.tables

    async def put(
        self,
        topic: str,
        key: str | None,
        value: Any,
        partition: int = 0,
        offset: int | None = None,
        timestamp: int | None = None,
    ) -> None:
        await deliver(self.loop, topic, key, value, partition, offset, timestamp)

    async def tombstone(
        self, key: str | bytes | None, timestamp: int, partition: int = 0, offset: int | None = None
    ) -> None:
        """A tombstone (null value) on the dimension topic, at Kafka timestamp ``timestamp``."""
        await deliver(self.loop, self.spec.dimension.topic, key, None, partition, offset, timestamp)

    async def event(
        self, value: dict[str, Any], partition: int = 0, offset: int | None = None
    ) -> None:
        await self.put(
            self.spec.events.topic, value[self.spec.events.key], value, partition, offset
        )

    async def dimension(
        self, value: dict[str, Any], partition: int = 0, offset: int | None = None
    ) -> None:
        await self.put(
            self.spec.dimension.topic, value[self.spec.dimension.key], value, partition, offset
        )

    async def tick(self, partition: int = 0) -> None:
        await self.put(self.spec.ticks, None, b"{}", partition)

    def outputs(self, topic: str | None = None) -> list[Any]:
        return outputs(self.sent, topic or self.spec.output)

    def joins(self, key: str, partition: int = 0) -> dict[str, Any]:
        """The key's joins in state: join id -> :class:`app.logic.event_join.Join`."""
        return {
            split_join_key(k)[2]: self.engine.state.load(raw)
            for k, raw in scan(self.tables.joins, *join_range(key, None, None), partition)
        }

    def clear(self) -> None:
        """Forget state and sends, as a fresh worker would (between randomised runs)."""
        self.sent.clear()
        for table in vars(self.tables).values():
            table.data.clear()
        self.engine.loop.drop_waiting()
        app.consumer._acked_end.clear()  # what a new worker has acked: nothing
        app.consumer._acked_by.clear()  # (per reader: app.compat.consumer)


@pytest.fixture
def join_harness() -> Callable[[str], Any]:
    """``async with join_harness("movies") as h: await h.event({...})``."""

    @asynccontextmanager
    async def start(name: str) -> AsyncIterator[JoinHarness]:
        engine = engines[name]
        with captured() as sent:
            h = JoinHarness(engine, sent)
            h.clear()
            yield h

    return start

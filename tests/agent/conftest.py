"""The agent tier's one harness: Faust's test_context, every send captured, tables cleared.

``deliver`` puts one message on an agent's topic and waits until the agent has handled it;
``captured`` patches the sends (and the producer's flush) so nothing needs a broker;
``join_harness`` drives any join spec's engine; the car tests build on ``deliver`` too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Callable, Iterator
from unittest import mock

import faust
import pytest
from faust.types import Message

from app.agents.event_join import JoinEngine, engines
from app.faust_app import app

Sent = list[tuple[str, Any, Any]]  # (topic, key, value) of every send, in order
_offsets = itertools.count()


async def deliver(agent: Any, topic: str, key: str | bytes | None, value: Any,
                  partition: int = 0) -> None:
    """Put one message on ``agent``'s ``topic`` and wait until the agent has handled it."""
    raw = value if isinstance(value, (bytes, type(None))) else json.dumps(value).encode()
    channel = agent.stream().channel
    message = Message(topic=topic, partition=partition, offset=next(_offsets),
                      timestamp=time.time(), timestamp_type=0, headers=None,
                      key=key.encode() if isinstance(key, str) else key, value=raw,
                      checksum=b"", serialized_key_size=0, serialized_value_size=0,
                      generation_id=app.consumer_generation_id)  # else the stream skips it
    await channel.put(await channel.decode(message))
    async with agent.new_value_processed:  # notified as the value enters the agent
        await agent.new_value_processed.wait()
    stream = agent.stream()
    for _ in range(100):  # ... so let the agent finish handling it
        if stream.current_event is None:
            break
        await asyncio.sleep(0)


@contextmanager
def captured() -> Iterator[Sent]:
    """Every ``Topic.send`` recorded instead of produced; the producer's flush a no-op."""
    app.finalize()
    sent: Sent = []

    async def fake_send(self: faust.Topic, *, key: Any = None, value: Any = None,
                        **kw: Any) -> None:
        sent.append((self.get_topic_name(), key, value))

    with mock.patch.object(faust.topics.Topic, "send", fake_send), \
            mock.patch.object(app.producer, "flush", mock.AsyncMock()), \
            mock.patch.object(app.producer, "send_soon", mock.Mock()):
        yield sent


def outputs(sent: Sent, topic: str) -> list[Any]:
    return [json.loads(v) for t, _, v in sent if t == topic]


class JoinHarness:
    """Puts messages on one engine's topics and records every send."""

    def __init__(self, engine: JoinEngine, agent: Any, sent: Sent) -> None:
        self.engine, self.agent, self.sent = engine, agent, sent
        self.spec, self.tables = engine.spec, engine.tables

    async def put(self, topic: str, key: str | None, value: Any, partition: int = 0) -> None:
        await deliver(self.agent, topic, key, value, partition)

    async def event(self, value: dict[str, Any], partition: int = 0) -> None:
        await self.put(self.spec.events.topic, value[self.spec.events.key], value, partition)

    async def dimension(self, value: dict[str, Any], partition: int = 0) -> None:
        await self.put(self.spec.dimension.topic, value[self.spec.dimension.key], value,
                       partition)

    async def tick(self, partition: int = 0) -> None:
        await self.put(self.spec.ticks, None, b"{}", partition)

    def outputs(self, topic: str | None = None) -> list[Any]:
        return outputs(self.sent, topic or self.spec.output)

    def clear(self) -> None:
        """Forget state and sends, as a fresh worker would (between randomised runs)."""
        self.sent.clear()
        for table in vars(self.tables).values():
            table.data.clear()
        self.engine.resumed.clear()


@pytest.fixture
def join_harness() -> Callable[[str], Any]:
    """``async with join_harness("movies") as h: await h.event({...})``."""

    @asynccontextmanager
    async def start(name: str) -> AsyncIterator[JoinHarness]:
        engine = engines[name]
        with captured() as sent:
            async with engine.agent.test_context() as agent:
                h = JoinHarness(engine, agent, sent)
                h.clear()
                yield h

    return start

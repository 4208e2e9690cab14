"""Agent-test harness for any join spec: Faust's test_context, sends captured, tables cleared."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable
from unittest import mock

import faust
import pytest
from faust.types import Message

from app.agents.event_join import JoinEngine, engines
from app.faust_app import app


class JoinHarness:
    """Puts messages on one engine's topics and records every send."""

    def __init__(self, engine: JoinEngine, agent: Any, sent: list[tuple[str, Any, Any]]) -> None:
        self.engine, self.agent, self.sent, self.offset = engine, agent, sent, 0
        self.spec = engine.spec

    async def put(self, topic: str, key: str | None, value: Any, partition: int = 0) -> None:
        raw = value if isinstance(value, (bytes, type(None))) else json.dumps(value).encode()
        channel = self.agent.stream().channel
        message = Message(topic=topic, partition=partition, offset=self.offset,
                          timestamp=time.time(), timestamp_type=0, headers=None,
                          key=None if key is None else key.encode(), value=raw, checksum=b"",
                          serialized_key_size=0, serialized_value_size=0,
                          generation_id=app.consumer_generation_id)  # else the stream skips it
        self.offset += 1
        await channel.put(await channel.decode(message))
        async with self.agent.new_value_processed:  # notified as the value enters the agent
            await self.agent.new_value_processed.wait()
        stream = self.agent.stream()
        for _ in range(100):  # ... so let the agent finish handling it
            if stream.current_event is None:
                break
            await asyncio.sleep(0)

    async def event(self, value: dict[str, Any], partition: int = 0) -> None:
        await self.put(self.spec.events.topic, value[self.spec.events.key], value, partition)

    async def dimension(self, value: dict[str, Any], partition: int = 0) -> None:
        await self.put(self.spec.dimension.topic, value[self.spec.dimension.key], value,
                       partition)

    async def tick(self, partition: int = 0) -> None:
        await self.put(self.spec.ticks, None, b"{}", partition)

    def outputs(self, topic: str | None = None) -> list[Any]:
        topic = topic or self.spec.output
        return [json.loads(v) for t, _, v in self.sent if t == topic]

    def clear(self) -> None:
        """Forget state and sends, as a fresh worker would (between randomised runs)."""
        self.sent.clear()
        for table in vars(self.engine.tables).values():
            table.data.clear()
        self.engine.resumed.clear()


@pytest.fixture
def join_harness() -> Callable[[str], Any]:
    """``async with join_harness("movies") as h: await h.event({...})``."""

    @asynccontextmanager
    async def start(name: str) -> AsyncIterator[JoinHarness]:
        app.finalize()
        engine = engines[name]
        sent: list[tuple[str, Any, Any]] = []

        async def fake_send(self: faust.Topic, *, key: Any = None, value: Any = None,
                            **kw: Any) -> None:
            sent.append((self.get_topic_name(), key, value))

        with mock.patch.object(faust.topics.Topic, "send", fake_send), \
                mock.patch.object(app.producer, "flush", mock.AsyncMock()), \
                mock.patch.object(app.producer, "send_soon", mock.Mock()):
            async with engine.agent.test_context() as agent:
                h = JoinHarness(engine, agent, sent)
                h.clear()
                yield h

    return start

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

from app.agents.durable import loops
from app.compat import delivery
from app.agents.event_join import JoinEngine, engines
from app.faust_app import app



class Sent(list):
    """(topic, key, value) of every output send, in order; ``changelog``: the same for every
    changelog row the tables' write-behind hands to the producer (app.compat.write_behind)."""

    def __init__(self) -> None:
        super().__init__()
        self.changelog: list[tuple[str, int | None, Any, Any]] = []  # (topic, partition, k, v)

_offsets = itertools.count()


async def deliver(agent: Any, topic: str, key: str | bytes | None, value: Any,
                  partition: int = 0, offset: int | None = None) -> None:
    """Put one message on ``agent``'s ``topic`` and wait until the agent has handled it.
    ``offset``: the message's (a re-delivery: the offset it had); default, a new one."""
    raw = value if isinstance(value, (bytes, type(None))) else json.dumps(value).encode()
    channel = agent.stream().channel
    offset = next(_offsets) if offset is None else offset
    message = Message(topic=topic, partition=partition, offset=offset,
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
    for _ in range(100):  # ... and deliver its batch (changelog, outputs, acks)
        if not any(loop.in_flight for loop in loops):
            break
        await asyncio.sleep(0)


@contextmanager
def captured() -> Iterator[Sent]:
    """Every send (``Topic.send``, and the loops' outputs and changelog rows,
    ``app.compat.delivery.send_direct``) recorded instead of produced; the producer's flush a
    no-op."""
    app.finalize()
    sent = Sent()

    async def fake_send(self: faust.Topic, *, key: Any = None, value: Any = None,
                        **kw: Any) -> None:
        sent.append((self.get_topic_name(), key, value))

    async def fake_send_direct(app_: Any, topic: str, key: Any, value: Any,
                               partition: int | None = None, **kw: Any) -> asyncio.Future:
        if topic.endswith("-changelog"):
            sent.changelog.append((topic, partition, key, value))
        else:
            sent.append((topic, key, value))
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        done.set_result(None)  # "in the broker": the loop may send the batch's outputs
        return done

    with mock.patch.object(faust.topics.Topic, "send", fake_send), \
            mock.patch.object(delivery, "send_direct", fake_send_direct), \
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

    async def put(self, topic: str, key: str | None, value: Any, partition: int = 0,
                  offset: int | None = None) -> None:
        await deliver(self.agent, topic, key, value, partition, offset)

    async def event(self, value: dict[str, Any], partition: int = 0,
                    offset: int | None = None) -> None:
        await self.put(self.spec.events.topic, value[self.spec.events.key], value, partition,
                       offset)

    async def dimension(self, value: dict[str, Any], partition: int = 0,
                        offset: int | None = None) -> None:
        await self.put(self.spec.dimension.topic, value[self.spec.dimension.key], value,
                       partition, offset)

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
        self.engine.loop.acked.clear()


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

"""app.loop.awaiting: where a suspended task waits, innermost await included."""

import asyncio

import pytest

from app.loop import awaiting


async def _inner(queue: asyncio.Queue) -> None:
    await queue.get()


async def _outer(queue: asyncio.Queue) -> None:
    await _inner(queue)


@pytest.mark.asyncio
async def test_chain_names_every_await_down_to_the_future():
    queue: asyncio.Queue = asyncio.Queue()
    task = asyncio.ensure_future(_outer(queue))
    await asyncio.sleep(0.01)
    chain = awaiting.chain(task)
    names = [step.rsplit(" ", 1)[-1] for step in chain]
    assert names[:2] == ["_outer", "_inner"]
    assert "get" in names  # asyncio.Queue.get: the await that blocks
    assert chain[-1] == "waits on Future pending"
    assert chain[0].startswith("tests/unit/test_awaiting.py:")
    queue.put_nowait(1)
    await task
    assert awaiting.chain(task) == ["(done)"]


@pytest.mark.asyncio
async def test_chain_of_a_failed_and_of_no_task():
    async def fail() -> None:
        raise ValueError("boom")

    task = asyncio.ensure_future(fail())
    await asyncio.gather(task, return_exceptions=True)
    assert awaiting.chain(task) == ["(done, raised ValueError('boom'))"]
    assert awaiting.chain(None) == ["(none)"]


def test_agents_joins_what_each_loop_describes_and_the_producer():
    class Loop:
        def __init__(self, text: str) -> None:
            self.describe = lambda: text

    class App:
        loops = [Loop("join a: idle"), Loop("join b: busy")]
        producer = None

    assert awaiting.agents(App()) == "join a: idle\njoin b: busy\nproducer: not started"


@pytest.mark.asyncio
async def test_the_producer_says_what_its_sends_wait_for():
    """A loop waiting in aiokafka's wait_drain waits for the producer's one request per node."""
    import time
    from types import SimpleNamespace

    from app.compat.producer import describe_producer

    sender_task = asyncio.ensure_future(asyncio.Event().wait())
    batch = SimpleNamespace(_ctime=time.monotonic() - 12.0)
    producer = SimpleNamespace(
        _sender=SimpleNamespace(
            _in_flight={0}, _muted_partitions={"a", "b"}, _sender_task=sender_task
        ),
        _message_accumulator=SimpleNamespace(_batches={"a": [batch], "b": []}),
    )
    app = SimpleNamespace(producer=SimpleNamespace(_producer=producer))
    text = describe_producer(app)
    assert text.startswith(
        "producer: requests in flight to nodes [0], 2 partitions muted, "
        "1 batches waiting (oldest 12."
    )
    assert text.endswith("sender running")
    sender_task.cancel()
    await asyncio.gather(sender_task, return_exceptions=True)
    assert describe_producer(app).endswith("sender STOPPED")
    assert (
        describe_producer(SimpleNamespace(producer=SimpleNamespace(_producer=None)))
        == "producer: not started"
    )

"""app.compat.producer.EtjProducerBuffer: Faust's producer buffer, with ``producer_threaded`` read once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from faust.transport.producer import ProducerBuffer

from app.compat.producer import EtjProducerBuffer


class Conf:
    def __init__(self, threaded: bool) -> None:
        self.threaded, self.reads = threaded, 0

    @property
    def producer_threaded(self) -> bool:
        self.reads += 1
        return self.threaded


def buffer(threaded: bool) -> tuple[EtjProducerBuffer, Conf]:
    b = EtjProducerBuffer()
    conf = Conf(threaded)
    b.app = SimpleNamespace(conf=conf)
    return b, conf


async def test_unthreaded_messages_wait_in_pending_and_the_setting_is_read_once():
    b, conf = buffer(threaded=False)
    for i in range(3):
        b.put(f"message {i}")
    assert b.size == 3 == ProducerBuffer.size.fget(b)  # upstream's own count
    assert list(b.pending._queue) == ["message 0", "message 1", "message 2"]
    assert b.size == 3
    assert conf.reads == 1 + 1  # ours once; upstream's size, called above, once more


async def test_threaded_messages_go_to_the_threaded_producers_queue():
    b, conf = buffer(threaded=True)
    queue: asyncio.Queue = asyncio.Queue()
    b.threaded_producer = SimpleNamespace(event_queue=queue, thread_loop=asyncio.get_running_loop())
    assert b.size == 0  # no queue yet
    b.put("m")
    for _ in range(3):
        await asyncio.sleep(0)  # run_coroutine_threadsafe's put runs on the loop
    assert list(queue._queue) == ["m"] and b.pending.empty()
    assert b.size == 1 == ProducerBuffer.size.fget(b)
    assert conf.reads == 1 + 1

"""The producer buffer reads Faust's ``producer_threaded`` setting once, not on every record.

Upstream (faust-streaming 0.15.3, ``faust.transport.producer.ProducerBuffer``): ``size`` and
``put`` read ``self.app.conf.producer_threaded`` each time — through the settings registry's
``__getattribute__`` and a ``Param`` descriptor. The conductor awaits ``wait_until_ebb()``, which
reads ``size``, before it hands on *every* fetched record (input and changelog alike), and
``put`` runs for every message sent. Symptom: ``wait_until_ebb`` was 14 % of the main thread of
a 1M-key RocksDB replay (py-spy ``--native``; 10 % in the settings lookup alone), and replay is
bound by that thread.

Here: the same two members, with the setting read on first use and kept on the buffer (it is
fixed when the app is configured, before the producer exists). Test:
``tests/unit/test_producer_buffer.py`` (both branches, the same sizes and queues as upstream).
Remove when Faust's buffer stops reading the setting per record.
"""

from __future__ import annotations

import asyncio
from typing import Any

from faust.transport.producer import ProducerBuffer

__all__ = ["install"]

_original_size = ProducerBuffer.size  # upstream's, for the test that compares counts


def _threaded(buffer: Any) -> bool:
    threaded = buffer._etj_threaded
    if threaded is None:
        threaded = buffer._etj_threaded = bool(buffer.app.conf.producer_threaded)
    return threaded


def size(self: ProducerBuffer) -> int:
    """Upstream's: messages waiting to be produced."""
    if _threaded(self):
        return len(self.queue._queue) if self.queue else 0  # type: ignore[attr-defined]
    return len(self.pending._queue)  # type: ignore[attr-defined]


def put(self: ProducerBuffer, fut: Any) -> None:
    """Upstream's: add a message to the buffer (the threaded producer's queue, if threaded)."""
    if _threaded(self):
        threaded_producer = self.threaded_producer
        if not self.queue:
            self.queue = threaded_producer.event_queue  # type: ignore[attr-defined]
        asyncio.run_coroutine_threadsafe(self.queue.put(fut), threaded_producer.thread_loop)
    else:
        self.pending.put_nowait(fut)


def install() -> None:
    ProducerBuffer._etj_threaded = None  # type: ignore[attr-defined]
    ProducerBuffer.size = property(size)  # type: ignore[assignment,method-assign]
    ProducerBuffer.put = put  # type: ignore[method-assign]

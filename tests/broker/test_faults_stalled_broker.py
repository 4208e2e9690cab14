"""The broker stops answering mid-stream (SIGSTOP, then SIGCONT): produce requests time out.

Below the delivery timeout the worker re-sends and rides the stall out; past it the worker stops
at once without committing (exit 75) and a restarted worker reads the uncommitted records again.
Either way the final answer is exact and every input record is accounted for (app/outputs/delivery.py).

The bundled broker is started for each test, whatever ``ETJ_BOOTSTRAP`` says: pausing it is the
fault under test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.commands.sample_traffic import sample_moods_and_events
from app.dev.local_broker import LocalBroker
from app.outputs.delivery import EXIT_CODE
from tests.faults import send, settle_and_check, wait_processed
from tests.harness import Names, PausableBroker, make_names

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(8))


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[PausableBroker]:
    b = PausableBroker(log_dir=tmp_path / "broker", use_existing=False).start()
    try:
        yield b
    finally:
        b.resume()
        b.stop()


def names_with_request_timeout(broker: LocalBroker, seconds: int) -> Names:
    names = make_names(broker.url)
    names.env["PRODUCER_REQUEST_TIMEOUT"] = str(seconds)  # Faust reads it from the environment
    return names


async def test_broker_stalled_past_the_request_timeout_the_worker_re_sends_and_is_exact(
    own_broker, worker_factory
):
    names = names_with_request_timeout(own_broker, 3)
    records = sample_moods_and_events(
        seed=51, count=160, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    w = worker_factory(names).wait_ready()

    # 1. traffic flows; a third in, the broker answers nothing for 10 s (> 3 request timeouts;
    #    the worker sends changelog rows, revisions and a tick per partition every second)
    sending = asyncio.create_task(send(names, records, pace_s=0.02))
    await asyncio.to_thread(wait_processed, w, len(records) // 3)
    own_broker.pause()
    await asyncio.sleep(10)
    own_broker.resume()
    sent = await sending

    # 2. the worker lived through it and its answer is exact, nothing lost
    await settle_and_check(names, records, sent, [w])
    assert w.proc is not None and w.proc.poll() is None, (
        "the worker died of a broker stall:\n" + w.log()[-4000:]
    )
    assert "Got error produce response" in w.log(), (
        "no produce request timed out: the stall did not test the re-send"
    )
    assert "fail-stop" not in w.log()


async def test_a_send_past_the_delivery_timeout_stops_the_worker_uncommitted(
    own_broker, worker_factory
):
    names = names_with_request_timeout(own_broker, 2)
    records = sample_moods_and_events(
        seed=52, count=160, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    first = worker_factory(names, name="first", producer_delivery_timeout_s=4).wait_ready()

    # 1. a third in, the broker stalls for longer than the delivery timeout: the worker exits 75
    sending = asyncio.create_task(send(names, records, pace_s=0.02))
    await asyncio.to_thread(wait_processed, first, len(records) // 3)
    own_broker.pause()
    try:
        code = await asyncio.to_thread(first.wait_exit, 30)
    finally:
        own_broker.resume()
    assert code == EXIT_CODE, first.log()[-4000:]
    assert "fail-stop" in first.log()

    # 2. a new worker: tables recovered from the changelogs, uncommitted records read again
    sent = await sending
    second = worker_factory(names, name="second").wait_ready()
    await settle_and_check(names, records, sent, [second])

"""An output the broker refuses for good: its input record goes to the dead letters, the agent
goes on (app.loop.durable, app.outputs.delivery). The broker's refusal is simulated here, on
the future of the send as a broker gives it; tests/broker/test_poison_pill.py has a real one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

from app import runtime
from app.faust_app import settings
from app.loop import pipeline
from app.loop.durable import loops
from app.outputs import delivery
from app.outputs.producer_batches import Sent as Delivery

POISON = b"POISON"


@pytest.fixture
async def harness(join_harness: Any) -> AsyncIterator[Any]:
    async with join_harness("moods") as h:
        yield h


def _failed(exc: BaseException) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_exception(exc)
    return fut


@contextmanager
def broker_refuses(refused: BaseException, alone_too: bool = True) -> Iterator[list[bytes]]:
    """Outputs whose value holds POISON fail on their future with ``refused``; sent alone
    (``send_alone``), refused again when ``alone_too``. Yields the values sent alone."""
    captured_records = pipeline.send_records  # the harness' fake, which records every send
    captured_send = delivery.send_direct
    alone: list[bytes] = []

    async def send_records(
        app: Any, records: Any, *, refusable: bool = False, on_sent: Any = None
    ) -> Any:
        poison = [i for i, r in enumerate(records) if refusable and POISON in (r[3] or b"")]
        sent = await captured_records(
            app, [r for i, r in enumerate(records) if i not in poison], refusable=refusable
        )
        keep = [i for i in range(len(records)) if i not in poison]
        out = Delivery([(fut, [keep[j] for j in idx]) for fut, idx in sent.futures])
        out.futures += [(_failed(refused), [i]) for i in poison]
        return out

    async def send_alone(
        app: Any, topic: str, key: Any, value: Any, timestamp: Any = None, headers: Any = None
    ) -> Any:
        alone.append(value)
        if alone_too:
            return _failed(refused)
        return await captured_send(app, topic, key, value)

    with (
        mock.patch.object(pipeline, "send_records", send_records),
        mock.patch.object(delivery, "send_alone", send_alone),
    ):
        yield alone


def event(rid: str, text: str, t: int) -> dict[str, Any]:
    return {"consultant": "ann", "recommendation": text, "event_time": t, "id": rid}


async def test_the_record_whose_revision_is_refused_is_dead_lettered_and_the_rest_joined(harness):
    with broker_refuses(MessageSizeTooLargeError()) as alone:
        await harness.put(
            settings.moods_topic, "ann", {"name": "ann", "mood": "happy", "event_time": 10}
        )
        await harness.event(event("a", "tea", 100))
        await harness.event(event("big", "POISON" * 10, 200))
        await harness.event(event("c", "cake", 300))
    assert len(alone) == 1  # confirmed alone before it condemns the record
    [dead] = harness.outputs(settings.dead_letter_topic)
    assert dead["topic"] == settings.events_topic and '"id": "big"' in dead["value"]
    assert dead["error"].startswith("output refused by the broker: MessageSizeTooLargeError")
    assert f"output to {settings.output_topic}, key 'big'" in dead["error"]
    assert [r["id"] for r in harness.outputs()] == ["a", "c"]
    assert not any(loop.in_flight for loop in loops)  # every record acked


async def test_a_refusal_that_was_a_batch_neighbours_is_not_a_dead_letter(harness):
    with broker_refuses(RecordListTooLargeError(), alone_too=False) as alone:
        await harness.event(event("a", "POISON tea", 100))
    assert len(alone) == 1 and harness.outputs(settings.dead_letter_topic) == []
    assert [r["id"] for r in harness.outputs()] == ["a"]  # the one sent alone


async def test_a_re_emitted_revision_refused_again_is_logged_not_blamed_on_the_trigger(
    harness, caplog
):
    """A re-delivered record re-emits the revisions it may have lost (after a restart): a
    refused repeat is logged and skipped; the record that came (a duplicate mood here) is not
    dead-lettered for it (the one that made the revision was, when first refused)."""
    await harness.event(event("big", "POISON", 100))  # sent: the broker did not refuse it then
    await harness.put(
        settings.moods_topic, "ann", {"name": "ann", "mood": "ok", "event_time": 50}, offset=10**6
    )  # revision 2 of "big", from this mood
    harness.loop.drop_waiting()  # as after a restart: nothing known delivered
    with broker_refuses(MessageSizeTooLargeError()):
        await harness.put(
            settings.moods_topic,
            "ann",
            {"name": "ann", "mood": "ok", "event_time": 50},
            offset=10**6,
        )
    assert harness.outputs(settings.dead_letter_topic) == []
    assert "refused a re-emitted output again" in caplog.text and "'big'" in caplog.text
    assert not any(loop.in_flight for loop in loops)  # the duplicate is acked


async def test_a_transient_failure_still_fails_stop(harness, monkeypatch):
    exits: list[int] = []
    monkeypatch.setattr(runtime, "_exit", exits.append)
    with broker_refuses(delivery.KafkaError("broker gone")):  # not refused for good
        await harness.event(event("a", "POISON", 100))
    assert exits and exits[0] == delivery.EXIT_CODE
    assert harness.outputs(settings.dead_letter_topic) == []

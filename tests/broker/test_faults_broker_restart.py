"""The *broker* restarts mid-stream (kill -9), with durable storage: the worker reconnects and
the final answer is exact.

Durable storage here: the broker keeps its log in S3, moto's S3 server, a separate process that
outlives the broker (``tests.harness.S3Broker`` says why). Topics, records and committed offsets
survive the restart (checked below).

Opt-in, against another broker: with ``ETJ_BOOTSTRAP`` set and ``ETJ_BROKER_RESTART_CMD`` a shell
command that restarts that broker (e.g. ``systemctl restart kafka``), the test restarts that one
instead (docs/concepts/guarantees.md#guaranteed).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.commands.sample_traffic import sample_moods_and_events
from app.dev.local_broker import wait_until_ready
from tests.faults import (
    answers,
    check_accounting,
    check_counts,
    check_revision_log,
    diagnose,
    diff,
    fates_of,
    send,
    settled_mood_history,
    wait_converged,
)
from tests.harness import S3Broker, make_names
from tests.oracle import exact_mood_answer

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(8))
RESTART_CMD_ENV = "ETJ_BROKER_RESTART_CMD"


class ExternalBroker:
    """Opt-in: the ETJ_BOOTSTRAP broker, restarted by the ETJ_BROKER_RESTART_CMD command."""

    def __init__(self) -> None:
        self.bootstrap = os.environ["ETJ_BOOTSTRAP"].split("://", 1)[-1]
        self.url = ",".join(f"kafka://{h}" for h in self.bootstrap.split(","))

    def restart(self) -> None:
        subprocess.run(os.environ[RESTART_CMD_ENV], shell=True, check=True, timeout=300)
        asyncio.run(wait_until_ready(self.bootstrap, 120))


@pytest.fixture
def durable_broker(
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[S3Broker | ExternalBroker]:
    if os.environ.get(RESTART_CMD_ENV) and os.environ.get("ETJ_BOOTSTRAP"):
        yield ExternalBroker()
        return
    b = S3Broker(tmp_path)
    try:
        b.start_storage()
        b.start()
        yield b
    finally:
        b.stop()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"\n===== broker log (last 4000 chars) =====\n{b.log()[-4000:]}")


def restart(broker: S3Broker | ExternalBroker) -> None:
    broker.restart()


async def test_broker_restart_mid_stream_worker_reconnects_and_is_exact(
    durable_broker, worker_factory
):
    names = make_names(durable_broker.url)
    records = sample_moods_and_events(
        seed=41, count=160, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    expected = exact_mood_answer(records)
    w = worker_factory(names).wait_ready()

    # 1. half the traffic, then the broker dies (kill -9) while the worker runs
    sent = await send(names, records[:80], pace_s=0.02)
    before = answers(await wait_converged(names, exact_mood_answer(records[:80]), timeout_s=90))
    assert before == exact_mood_answer(records[:80]), diff(before, exact_mood_answer(records[:80]))
    await asyncio.to_thread(restart, durable_broker)

    # 2. what the broker stored survived: the records and revisions sent before the restart
    assert answers(await wait_converged(names, before, timeout_s=30)) == before

    # 3. the worker reconnects by itself; the rest of the traffic
    sent += await send(names, records[80:], pace_s=0.02)
    revs = await wait_converged(names, expected, timeout_s=180)
    if answers(revs) != expected:
        print(await diagnose(names, [w]))
    assert answers(revs) == expected, diff(answers(revs), expected)
    assert w.proc is not None and w.proc.poll() is None, "the worker died with the broker"
    check_revision_log(revs)
    check_counts(revs, expected)
    check_accounting(
        sent,
        await fates_of(names),
        revs,
        await settled_mood_history([w], sent),
        expect_dead=set(),
        expect_late=set(),
    )

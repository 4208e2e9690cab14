"""Schema Registry formats on the real broker (issue 56, item 1): events written by
confluent-kafka's own ``AvroSerializer`` (nested, timed by an Avro ``timestamp-millis``, keyed
by a Long as Kafka's LongSerializer writes it, repartitioned: the hop re-keys them by their
composite key (``tenant``, ``user.id``) as the compact JSON array text the dimension is keyed by)
join a dimension written by its ``ProtobufSerializer`` (a message other than its file's first,
timed by a ``google.protobuf.Timestamp``, keyed by the composite key (``org``, ``user``) as
``["acme","40"]``, read as it is), one of whose versions is effective three days after it is
published (the dimension's own ``max_future_ms``): it answers the views after its time and moves
its partition's stream time only to its due time. The revisions are Avro that confluent-kafka's
``AvroDeserializer`` reads back, exactly the oracle's answer across a kill -9 of the worker.
A record whose schema id the registry does not know is a dead letter naming the id, and the
registry stopped while records with a schema id new to the worker flow (through the hop) loses
nothing: the batch waits (``etj_schema_registry_waits``, a log line), then every answer is exact
and none is a dead letter.

The registry is :mod:`tests.schema_registry` (no registry server can be installed here): the
REST calls confluent-kafka's client makes, which etj's client makes too."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import struct
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2
from prometheus_client.parser import text_string_to_metric_families

from app.joins.resolve import resolve
from app.settings import Settings
from tests.faults import worker_metrics
from tests.harness import Names, bootstrap, create_topic, latest_by_id, read_all, wait_for
from tests.oracle import Event, exact_answer
from tests.schema_registry import RegistryServer, proto_class

BASE = 1_790_000_000_000
DAY = 86_400_000
USERS = list(range(40, 48))  # user ids: the events' Long keys
TENANTS = ["acme", "globex"]  # each with every user id: the composite key tells them apart
LATER = BASE + 3 * DAY  # the effective-dated plan's time, published at BASE + 45 s


def composite(*parts: Any) -> str:
    """The oracle's own writing of a composite key (the standard library's JSON, compact)."""
    return json.dumps(list(parts), separators=(",", ":"))


def view_schema(version: int) -> str:
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "string"},
        {"name": "tenant", "type": "string"},
        {
            "name": "user",
            "type": {
                "type": "record",
                "name": "User",
                "fields": [
                    {"name": "id", "type": "string"},
                    {"name": "tier", "type": ["null", "string"], "default": None},
                ],
            },
        },
        {"name": "page", "type": "string"},
        {
            "name": "meta",
            "type": {
                "type": "record",
                "name": "Meta",
                "fields": [
                    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}
                ],
            },
        },
    ]
    if version == 2:  # a new writer schema mid-run: a schema id the worker has not seen
        fields.append({"name": "referrer", "type": ["null", "string"], "default": None})
    return json.dumps({"type": "record", "name": "View", "namespace": "shop", "fields": fields})


def plans_file() -> descriptor_pb2.FileDescriptorProto:
    """``shop/plans.proto``: ``Envelope`` first, so ``Plan`` is message 1 (its index array is
    on the wire); ``Plan`` timed by a Timestamp."""
    f = descriptor_pb2.FileDescriptorProto(
        name="shop/plans.proto",
        package="shop",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    T = descriptor_pb2.FieldDescriptorProto
    f.message_type.add(name="Envelope").field.add(
        name="kind", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL
    )
    plan = f.message_type.add(name="Plan")
    plan.field.add(name="user", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    plan.field.add(name="org", number=4, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    plan.field.add(name="plan", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    plan.field.add(
        name="at",
        number=3,
        type=T.TYPE_MESSAGE,
        label=T.LABEL_OPTIONAL,
        type_name=".google.protobuf.Timestamp",
    )
    return f


def sr_spec(prefix: str) -> dict[str, Any]:
    return {
        "name": "sr",
        "events": {
            "topic": f"{prefix}-views",
            "key": ["tenant", "user.id"],
            "time": "meta.at",
            "id": "id",
            "format": "avro",
            "key_format": "long",
            "repartition": True,
            "fields": {
                "id": "str",
                "tenant": "str",
                "user.id": "str",
                "user.tier": "str?",
                "page": "str",
                "meta.at": "time",
            },
            "copy": ["tenant", "user.id", "user.tier", "page", {"meta.at": "viewed_at"}],
        },
        "dimension": {
            "topic": f"{prefix}-plans",
            "key": ["org", "user"],
            "time": "at",
            "format": "protobuf",
            "key_format": "str",
            "max_future_ms": 7 * DAY,  # versions effective later: a plan from next week
            "fields": {"org": "str", "user": "str", "plan": "str", "at": "time"},
            "copy": ["plan"],
            "time_as": "plan_time",
        },
        "output": f"{prefix}-sr-out",
        "ticks": f"{prefix}-sr-ticks",
        "retention_ms": 10**12,
        "output_format": "avro",
    }


#: (Kafka key, value as a dict, event time, Kafka timestamp)
Record = tuple[Any, dict[str, Any], int, int]


def traffic(seed: int) -> tuple[list[Record], list[Record]]:
    """Views keyed by their user id (a long: not their join key, so repartitioned) and plan
    versions keyed by the composite key (org, user) as compact JSON text, event times out of
    order across keys; one plan (acme, 40) effective three days after it is published, and the
    last views of the run at, just before and after its time."""
    rnd = random.Random(seed)
    plans: list[Record] = []
    for o in TENANTS:
        for u in USERS:
            for _ in range(2):
                at = BASE + rnd.randrange(0, 60_000)
                value = {"org": o, "user": str(u), "plan": rnd.choice(["free", "pro", "team"])}
                plans.append((composite(o, str(u)), value, at, at))
    rnd.shuffle(plans)
    # read by the second worker (plans[12:18]): ahead of its Kafka timestamp by three days
    plans.insert(
        14,
        (
            composite("acme", "40"),
            {"org": "acme", "user": "40", "plan": "next"},
            LATER,
            BASE + 45_000,
        ),
    )
    views: list[Record] = []

    def view(i: int, tenant: str, u: int, at: int) -> Record:
        tier = rnd.choice([None, "gold"])
        value = {
            "id": f"v{i}",
            "tenant": tenant,
            "user": {"id": str(u), "tier": tier},
            "page": f"/p{i % 5}",
        }
        return (u, value, at, at)

    for i in range(150):
        views.append(view(i, rnd.choice(TENANTS), rnd.choice(USERS), BASE + rnd.randrange(60_000)))
    for i, (tenant, at) in enumerate(
        [("acme", LATER - 1), ("acme", LATER), ("acme", LATER + 7), ("globex", LATER + 7)], 150
    ):
        views.append(view(i, tenant, 40, at))
    return views, plans


class Producers:
    """confluent-kafka's serializers, through its own client: a Confluent producer's bytes."""

    def __init__(self, registry: RegistryServer, spec: Any) -> None:
        client = SchemaRegistryClient({"url": registry.url})
        self.views = {v: AvroSerializer(client, view_schema(v)) for v in (1, 2)}
        self.plan_cls = proto_class(plans_file(), "shop.Plan")
        self.plans = ProtobufSerializer(self.plan_cls, client, {"use.deprecated.format": False})
        self.spec = spec

    def view(self, record: Record, version: int = 1) -> tuple[bytes, bytes, int]:
        key, value, at, ts = record
        wire = {**value, "meta": {"at": dt.datetime.fromtimestamp(at / 1000, tz=dt.UTC)}}
        ctx = SerializationContext(self.spec.events.topic, MessageField.VALUE)
        return struct.pack(">q", key), self.views[version](wire, ctx), ts  # LongSerializer

    def plan(self, record: Record) -> tuple[bytes, bytes, int]:
        key, value, at, ts = record
        msg = self.plan_cls(org=value["org"], user=value["user"], plan=value["plan"])
        msg.at.FromMilliseconds(at)
        ctx = SerializationContext(self.spec.dimension.topic, MessageField.VALUE)
        return key.encode(), self.plans(msg, ctx), ts


async def send(
    names: Names, topic: str, records: list[tuple[bytes, bytes, int]], pace_s: float = 0.0
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await producer.start()
    try:
        for key, value, at in records:
            await producer.send_and_wait(topic, value, key=key, timestamp_ms=at)
            if pace_s:
                await asyncio.sleep(pace_s)
    finally:
        await producer.stop()


async def revisions(names: Names, topic: str, registry: RegistryServer) -> list[dict[str, Any]]:
    """The revision log, read by confluent-kafka's ``AvroDeserializer``."""
    read = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [read(v, ctx) for _, v in await read_all(names, topic, idle_s=0.5)]


def stream_times(worker: Any, join: str) -> dict[str, float]:
    """``etj_stream_time_ms`` of one join, per partition."""
    status, body = worker.get("/metrics")
    assert status == 200, body
    text = body.decode() if isinstance(body, bytes) else str(body)
    return {
        s.labels["partition"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "etj_stream_time_ms" and s.labels.get("join") == join
    }


@pytest.fixture
def registry():
    with RegistryServer() as server:
        yield server


def test_avro_events_join_a_protobuf_dimension_into_avro_revisions_exactly_across_a_kill_9(
    names: Names, worker_factory, tmp_path, registry
):
    raw = sr_spec(names.prefix)
    spec = resolve(raw, app_id=names.app_id)
    asyncio.run(create_topic(names, spec.events.topic, 3))  # repartitioned: any count
    asyncio.run(create_topic(names, spec.dimension.topic, 4))  # read as it is: the join's count
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    env = {"joins_file": path, "schema_registry_url": registry.url}
    views, plans = traffic(seed=56)
    p = Producers(registry, spec)
    unknown_id = 99_999
    bad = [
        (struct.pack(">q", 40), b"\x00" + unknown_id.to_bytes(4, "big") + b"\x02x", BASE),
        (struct.pack(">q", 41), p.view(views[0])[1][:-6], BASE),  # truncated
        (struct.pack(">q", 42), json.dumps({"id": "j"}).encode(), BASE),  # not framed
    ]

    first = worker_factory(names, name="first", **env).wait_ready()
    asyncio.run(send(names, spec.dimension.topic, [p.plan(r) for r in plans[:12]]))
    asyncio.run(send(names, spec.events.topic, [p.view(r) for r in views[:60]] + bad))

    async def some_joined() -> bool:
        return len(await read_all(names, spec.output, idle_s=0.3)) >= 20

    async def kill_mid_stream() -> None:
        assert await wait_for(some_joined, timeout_s=90, every_s=0.5)
        rest = [p.view(r) for r in views[60:110]]
        sending = asyncio.create_task(send(names, spec.events.topic, rest, pace_s=0.03))
        await asyncio.sleep(0.5)
        assert first.kill() == -9
        assert not sending.done(), "the kill must land while records are still being sent"
        await sending

    asyncio.run(kill_mid_stream())
    asyncio.run(send(names, spec.dimension.topic, [p.plan(r) for r in plans[12:18]]))
    second = worker_factory(names, name="second", **env).wait_ready()

    async def caught_up() -> bool:
        got = latest_by_id(await revisions(names, spec.output, registry))
        return len(got) >= 110 - len(bad)

    assert asyncio.run(wait_for(caught_up, timeout_s=120, every_s=2))
    # the plan effective three days later is in, and moved its partition's stream time only to
    # its due time: its Kafka timestamp + ETJ_MAX_FUTURE_MS
    due = BASE + 45_000 + Settings().max_future_ms

    async def due_reached() -> bool:
        return max(stream_times(second, "sr").values(), default=0) >= due

    assert asyncio.run(wait_for(due_reached, timeout_s=30, every_s=0.5))
    assert max(stream_times(second, "sr").values()) == due, stream_times(second, "sr")

    # the registry stops while records of a writer schema new to the worker flow: the batch
    # holding them waits, whole, and nothing is dead-lettered
    late_views = [p.view(r, version=2) for r in views[110:]]  # registers version 2 first
    registry.pause()
    try:
        asyncio.run(send(names, spec.events.topic, late_views))
        asyncio.run(send(names, spec.dimension.topic, [p.plan(r) for r in plans[18:]]))
        deadline = time.monotonic() + 30
        while "does not answer" not in second.log() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "does not answer" in second.log(), second.log()[-3000:]
        time.sleep(3)
    finally:
        registry.resume()

    expected = exact_answer(
        spec.rules,
        [(composite(v["org"], v["user"]), [at, v["plan"]]) for _, v, at, _ in plans],
        [Event(composite(v["tenant"], v["user"]["id"]), v["id"], at, ()) for _, v, at, _ in views],
    )
    # the plan effective later answers the views after its time (asof "before"), only those
    assert expected["v152"][4:] == (("next",), LATER), expected["v152"]
    assert all(expected[i][4] not in (None, ("next",)) for i in ("v150", "v151", "v153"))

    async def exact() -> bool:
        latest = latest_by_id(await revisions(names, spec.output, registry))
        return {i: (r["plan"], r["plan_time"]) for i, r in latest.items()} == {
            i: (e[4] and e[4][0], e[5]) for i, e in expected.items()
        }

    assert asyncio.run(wait_for(exact, timeout_s=120, every_s=2))
    revs = asyncio.run(revisions(names, spec.output, registry))
    answers: dict[tuple[str, int], set[Any]] = {}
    for r in revs:  # records read again after the kill double no answer
        answers.setdefault((r["id"], r["revision"]), set()).add((r["plan"], r["plan_time"]))
    assert all(len(a) == 1 for a in answers.values()), answers
    assert any(r["revision"] > 1 for r in revs), "the scenario must contain corrections"
    v1 = latest_by_id(revs)["v1"]
    assert (v1["tenant"], v1["user_id"], v1["viewed_at"]) == (
        views[1][1]["tenant"],
        views[1][1]["user"]["id"],
        views[1][2],
    )
    assert list(v1) == [*spec.output_fields, "partition", "source"]
    assert worker_metrics(second)["etj_schema_registry_waits_total"][""] > 0

    dead = [v for _, v in asyncio.run(read_all(names, names.dead_letter_topic, idle_s=0.5))]
    mine = [d for d in dead if d.get("topic") == spec.events.topic]
    # (once per record: one dead-lettered again after the kill is the same record)
    errors = sorted({(d["partition"], d["offset"]): d["error"] for d in mine}.values())
    assert len(errors) == len(bad), errors  # the bad ones, and nothing the registry's stop made
    assert any(f"schema id {unknown_id}: unknown to the schema registry" in e for e in errors)
    assert any("does not decode as Avro" in e for e in errors)
    assert any("not Schema Registry framed" in e for e in errors)

"""Schema Registry formats and binary keys (issue 56, item 1): records produced by
confluent-kafka's own serializers (``AvroSerializer``, ``ProtobufSerializer``,
``JSONSerializer``) through its own ``SchemaRegistryClient``, against the test registry
(:mod:`tests.schema_registry`), read by a spec side into the flat record a JSON side gives;
keys in every ``key_format``; an unknown schema id and bytes that do not decode are dead
letters naming the id and the reason; a registry that does not answer is waited for."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import struct
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import IntegerSerializer, MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from app.inputs.records import InvalidRecord
from app.inputs.wire_formats import encode_key, framed_id, key_decoder, value_decoder
from app.joins.resolve import resolve
from app.kafka import schema_registry as sr
from app.kafka.schema_registry import SchemaRegistry, Unknown
from tests.schema_registry import RegistryServer, proto_class

pytestmark = pytest.mark.unit

UTC = dt.UTC
BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z

VIEW = {
    "type": "record",
    "name": "View",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "string"},
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
        {"name": "qty", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}


def tier_file() -> descriptor_pb2.FileDescriptorProto:
    """``shop/tiers.proto``: a ``Header`` first (so ``Tier`` is message 1: a message index
    other than the default), ``Tier`` with a nested ``Plan`` and a Timestamp."""
    f = descriptor_pb2.FileDescriptorProto(
        name="shop/tiers.proto",
        package="shop",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    T = descriptor_pb2.FieldDescriptorProto
    header = f.message_type.add(name="Header")
    header.field.add(name="source", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    tier = f.message_type.add(name="Tier")
    plan = tier.nested_type.add(name="Plan")
    plan.field.add(name="name", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    plan.field.add(name="seats", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    tier.field.add(name="user", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    tier.field.add(
        name="plan",
        number=2,
        type=T.TYPE_MESSAGE,
        label=T.LABEL_OPTIONAL,
        type_name=".shop.Tier.Plan",
    )
    tier.field.add(
        name="at",
        number=3,
        type=T.TYPE_MESSAGE,
        label=T.LABEL_OPTIONAL,
        type_name=".google.protobuf.Timestamp",
    )
    tier.field.add(name="tags", number=4, type=T.TYPE_STRING, label=T.LABEL_REPEATED)
    return f


@pytest.fixture(scope="module")
def registry():
    with RegistryServer() as server:
        yield server


def ctx(topic: str, field: str = MessageField.VALUE) -> SerializationContext:
    return SerializationContext(topic, field)


def fetched(server: RegistryServer, *data: tuple[bytes, str]) -> SchemaRegistry:
    """etj's client, with the schemas of ``data`` ((framed bytes, format)) fetched."""
    client = SchemaRegistry(server.url)
    asyncio.run(client.prefetch([(framed_id(b), fmt) for b, fmt in data]))
    return client


def avro_view(server: RegistryServer, **over: Any) -> bytes:
    value = {
        "id": "v1",
        "user": {"id": "42", "tier": None},
        "page": "/",
        "qty": 3,
        "at": dt.datetime(2026, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC),
        "seen": dt.datetime(2026, 1, 1, 0, 0, 2, 123_456, tzinfo=UTC),
        **over,
    }
    client = SchemaRegistryClient({"url": server.url})
    return AvroSerializer(client, json.dumps(VIEW))(value, ctx("views"))


def avro_spec(**events: Any) -> dict[str, Any]:
    return {
        "name": "views",
        "events": {
            "topic": "views",
            "key": "user.id",
            "time": "at",
            "id": "id",
            "format": "avro",
            "key_format": "long",
            "fields": {
                "id": "str",
                "user.id": "str",
                "user.tier": "str?",
                "page": "str",
                "qty": "int",
                "at": "time",
                "seen": "time",
            },
            "copy": ["user.id", "user.tier", "page", "qty", "seen"],
            **events,
        },
        "dimension": {
            "topic": "tiers",
            "key": "user",
            "time": "at",
            "format": "protobuf",
            "key_format": "long",
            "fields": {"user": "str", "plan.name": "str", "plan.seats": "int", "at": "time"},
            "copy": [{"plan.name": "plan"}, "plan.seats"],
            "time_as": "tier_time",
        },
        "output": "out",
        "ticks": "ticks",
        "retention_ms": 10**9,
    }


def test_avro_events_keyed_by_a_long_are_read_as_their_json_twin_would_be(registry):
    data = avro_view(registry)
    assert data[0] == 0 and framed_id(data) is not None  # a Confluent producer's bytes
    side = resolve(avro_spec()).events
    parse = side.parser(fetched(registry, (data, "avro")))
    rec = parse(struct.pack(">q", 42), data)  # Kafka's LongSerializer: 8 bytes, big-endian
    assert (rec.id, rec.user_id, rec.user_tier, rec.page, rec.qty) == ("v1", "42", None, "/", 3)
    # timestamp-millis is the event time in ms as it is, timestamp-micros truncated to ms
    assert (rec.at, rec.seen) == (BASE + 1500, BASE + 2123)
    with pytest.raises(InvalidRecord, match="key '43' disagrees with user.id '42'"):
        parse(struct.pack(">q", 43), data)
    with pytest.raises(InvalidRecord, match=r"key is not a long .*: 2 bytes"):
        parse(b"42", data)


def test_protobuf_messages_read_by_their_message_index_with_nested_and_well_known_types(registry):
    tier_cls = proto_class(tier_file(), "shop.Tier")
    msg = tier_cls(user="42", tags=["a", "b"])
    msg.plan.name, msg.plan.seats = "gold", 5
    msg.at.FromMilliseconds(BASE + 7)
    client = SchemaRegistryClient({"url": registry.url})
    data = ProtobufSerializer(tier_cls, client, {"use.deprecated.format": False})(msg, ctx("tiers"))
    assert data[5:6] == b"\x02" and data[6:7] == b"\x02"  # index array [1]: Tier, 2nd message
    schemas = fetched(registry, (data, "protobuf"))
    decoded = value_decoder("protobuf", schemas)(data)
    assert decoded == {
        "user": "42",
        "plan": {"name": "gold", "seats": 5},
        "at": BASE + 7,
        "tags": ["a", "b"],
    }
    side = resolve(avro_spec()).dimension
    rec = side.parser(schemas)(struct.pack(">q", 42), data)
    assert (rec.user, rec.plan, rec.plan_seats, rec.at) == ("42", "gold", 5, BASE + 7)
    # a message without its plan: the nested field is missing, named by its path
    bare = tier_cls(user="42")
    bare.at.FromMilliseconds(BASE)
    data = ProtobufSerializer(tier_cls, client, {"use.deprecated.format": False})(
        bare, ctx("tiers")
    )
    with pytest.raises(InvalidRecord, match="plan.name: missing"):
        side.parser(schemas)(struct.pack(">q", 42), data)


def test_json_schema_framed_values_are_json_after_the_header(registry):
    schema = json.dumps({"type": "object", "properties": {"user": {"type": "string"}}})
    client = SchemaRegistryClient({"url": registry.url})
    data = JSONSerializer(schema, client)({"user": "u1", "at": BASE}, ctx("plain"))
    assert value_decoder("json-sr", fetched(registry, (data, "json-sr")))(data) == {
        "user": "u1",
        "at": BASE,
    }


@pytest.mark.parametrize(
    ("key_format", "key", "text"),
    [
        ("long", struct.pack(">q", -7), b"-7"),
        ("int", IntegerSerializer()(2024, None), b"2024"),
        ("json", b'"u1"', b"u1"),
        ("json", b"42", b"42"),
        ("json", b'{"id": "u1"}', b"u1"),  # a record of one field: that field
    ],
)
def test_key_formats_give_the_key_canonical_text(key_format, key, text):
    decode = key_decoder(key_format, None)
    assert decode is not None and decode(key) == text
    assert decode(None) is None  # the parser then says the record has no key


@pytest.mark.parametrize(
    ("key_format", "key", "reason"),
    [
        ("int", b"\x00\x01", r"key is not an int \(key_format int: 4 bytes, big-endian\): 2 bytes"),
        ("json", b"u1", "key is not JSON"),
        ("json", b'{"a": 1, "b": 2}', "key is a record of 2 fields: a key is a string, an integer"),
        ("json", b"true", "key is boolean"),
    ],
)
def test_keys_that_do_not_decode_say_why(key_format, key, reason):
    decode = key_decoder(key_format, None)
    assert decode is not None
    with pytest.raises(InvalidRecord, match=reason):
        decode(key)


def test_avro_keys_are_framed_and_read_by_their_canonical_text(registry):
    client = SchemaRegistryClient({"url": registry.url})
    key_schema = json.dumps(
        {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
    )
    key = AvroSerializer(client, key_schema)({"id": 42}, ctx("views", MessageField.KEY))
    decode = key_decoder("avro", fetched(registry, (key, "avro")))
    assert decode is not None and decode(key) == b"42"


def test_an_unknown_schema_id_is_a_dead_letter_naming_it(registry):
    data = b"\x00" + (4242).to_bytes(4, "big") + b"\x02x"
    schemas = fetched(registry, (data, "avro"))
    assert isinstance(schemas.lookup(4242), Unknown)
    with pytest.raises(
        InvalidRecord, match=r"value: schema id 4242: unknown to the schema registry"
    ):
        value_decoder("avro", schemas)(data)


def test_bytes_that_do_not_decode_are_dead_letters_saying_why(registry):
    data = avro_view(registry)
    schemas = fetched(registry, (data, "avro"))
    decode = value_decoder("avro", schemas)
    sid = framed_id(data)
    for bad, reason in (
        (b'{"id": "v1"}', "not Schema Registry framed .*first byte is 0x7b, not the magic byte 0"),
        (b"\x00\x00\x01", "3 bytes, shorter than the 5-byte header"),
        (data[:-4], f"schema id {sid}: does not decode as Avro"),
        (data + b"\x00", f"schema id {sid}: does not decode as Avro: .*1 bytes left over"),
        (None, "empty value"),
    ):
        with pytest.raises(InvalidRecord, match=reason):
            decode(bad)
    # a schema of another type than the side's format
    with pytest.raises(InvalidRecord, match=f"schema id {sid} is a AVRO schema, not PROTOBUF"):
        value_decoder("protobuf", schemas)(data)


def test_a_registry_that_does_not_answer_is_waited_for_then_read_never_dead_lettered(
    registry, caplog
):
    data = avro_view(registry, id="v-wait")
    sid = framed_id(data)
    assert sid is not None
    slept: list[float] = []

    async def sleep(s: float) -> None:  # the registry comes back after the third wait
        slept.append(s)
        if len(slept) == 3:
            registry.resume()

    client = SchemaRegistry(registry.url, sleep=sleep)
    before = sr.waits._value.get()
    registry.pause()
    try:
        asyncio.run(client.prefetch([(sid, "avro")]))
    finally:
        registry.resume()
    assert slept == [0.25, 0.5, 1.0]  # backoff, doubling
    assert sr.waits._value.get() - before == 3
    assert value_decoder("avro", client)(data)["id"] == "v-wait"
    assert sum("does not answer" in r.getMessage() for r in caplog.records) == 1  # once a minute


def test_basic_auth_is_sent_and_a_refusal_is_waited_for_not_a_dead_letter():
    with RegistryServer("etj", "s3cret") as server:
        sid = server.register("x-value", json.dumps({"type": "string"}))
        ok = SchemaRegistry(server.url, "etj", "s3cret")
        asyncio.run(ok.prefetch([(sid, "avro")]))
        assert ok.lookup(sid) is not None and not isinstance(ok.lookup(sid), Unknown)

        tries = []

        async def give_up(s: float) -> None:
            tries.append(s)
            if len(tries) == 2:
                raise asyncio.CancelledError  # stands for the worker stopping meanwhile

        wrong = SchemaRegistry(server.url, "etj", "nope", sleep=give_up)
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(wrong.prefetch([(sid, "avro")]))
        assert wrong.lookup(sid) is None  # nothing learnt: no record refused for it


def test_the_cache_is_bounded_least_recently_used_first_out(registry):
    ids = [
        registry.register(f"lru-{i}-value", json.dumps({"type": "string", "doc": str(i)}))
        for i in range(4)
    ]
    client = SchemaRegistry(registry.url, capacity=2)
    asyncio.run(client.prefetch([(ids[0], "avro"), (ids[1], "avro")]))
    client.lookup(ids[0])  # used: kept
    asyncio.run(client.prefetch([(ids[2], "avro")]))
    assert list(client.cache) == [ids[0], ids[2]]
    # a batch needing more ids than the bound keeps them all until it is parsed
    asyncio.run(client.prefetch([(i, "avro") for i in ids[1:]]))
    assert set(client.cache) >= set(ids[1:])


def test_a_hop_writes_keys_as_the_other_side_writes_them():
    assert encode_key("42", "long") == struct.pack(">q", 42)
    assert encode_key("42", "int") == struct.pack(">i", 42)
    assert encode_key("u1", "str") == b"u1"
    for bad in ("u1", "042", str(2**63)):
        with pytest.raises(InvalidRecord, match="is not a 64-bit integer"):
            encode_key(bad, "long")


def test_a_decoded_record_the_fast_path_refuses_gets_the_model_s_reason(registry):
    """msgspec only accepts: a type or a bound it refuses is judged by the model, whose reason
    (naming the spec's path) is the dead letter's; what the model accepts is the same record."""
    data = avro_view(registry, page="")
    schemas = fetched(registry, (data, "avro"))
    wrong_type = avro_spec(fields={**avro_spec()["events"]["fields"], "qty": "str"})
    with pytest.raises(
        InvalidRecord, match=r"invalid ViewsIn: qty: Input should be a valid string"
    ):
        resolve(wrong_type).events.parser(schemas)(struct.pack(">q", 42), data)
    flat = avro_spec(key="id", fields={"id": "str", "page": "str", "qty": "int", "at": "time"})
    flat["events"].update(key_format="str", copy=["page"])
    flat["dimension"].update(key_format="str")
    rec = resolve(flat).events.parser(schemas)(b"v1", data)  # every field top-level: as is
    assert (rec.id, rec.page, rec.qty, rec.at) == ("v1", "", 3, BASE + 1500)

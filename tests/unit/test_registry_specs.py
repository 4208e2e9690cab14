"""Schema Registry formats in a spec (issue 56, items 1, 2 and 8): every new key refused with
the spec and the field named when wrong; keys co-partition by bytes (so two sides read as they
are share a key format, and a hop writes the other side's); ``"output_format": "avro"`` (or
``json-sr``) writes revisions that confluent-kafka's own ``AvroDeserializer`` (or
``JSONDeserializer``) reads back, with the schema registered under ``<output>-value``."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from app.inputs.records import InvalidRecord
from app.inputs.wire_formats import framed_id
from app.joins.catalog import car_spec
from app.joins.fk_spec import resolve_fk
from app.joins.rekey import rekeyer
from app.joins.resolve import refuse_without_registry, resolve, resolve_all
from app.joins.spec import SpecError
from app.kafka.schema_registry import SchemaRegistry, subject_of
from app.logic.event_join import Revision
from app.outputs.revision_formats import SCHEMA_TYPES, encoder, revision_schema
from app.settings import Settings
from tests.schema_registry import RegistryServer
from tests.unit.test_wire_formats import avro_spec, avro_view, fetched

pytestmark = pytest.mark.unit


def refused(raw: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as exc:
        resolve_all([raw])
    return str(exc.value)


def with_events(**events: Any) -> dict[str, Any]:
    raw = avro_spec()
    raw["events"].update(events)
    return raw


def test_every_new_key_is_refused_naming_the_spec_and_the_field():
    assert refused(with_events(format="xml")) == (
        "join spec #1 'views': events.format: Input should be 'json', 'json-sr', 'avro' or "
        "'protobuf'"
    )
    assert refused(with_events(key_format="utf8")) == (
        "join spec #1 'views': events.key_format: Input should be 'str', 'json', 'long', "
        "'int' or 'avro'"
    )
    assert refused({**avro_spec(), "output_format": "parquet"}) == (
        "join spec #1 'views': output_format: Input should be 'json', 'json-sr' or 'avro'"
    )


def test_a_framed_format_without_a_registry_is_a_start_refusal_naming_the_spec_and_side():
    specs = resolve_all([avro_spec()])
    with pytest.raises(SpecError) as exc:
        refuse_without_registry(specs, None)
    assert str(exc.value) == (
        "join spec 'views': events.format 'avro' needs a Schema Registry: set "
        "ETJ_SCHEMA_REGISTRY_URL (docs/joins/declarative.md#schema-registry-formats)"
    )
    assert refuse_without_registry(specs, "http://registry:8081") == specs
    plain = avro_spec()
    for side in ("events", "dimension"):
        plain[side].update(format="json", key_format="long")
    assert refuse_without_registry(resolve_all([plain]), None)  # long keys need none
    with pytest.raises(SpecError, match="output_format 'avro' needs a Schema Registry"):
        refuse_without_registry(resolve_all([{**plain, "output_format": "avro"}]), None)


def test_sides_read_as_they_are_must_write_their_keys_alike():
    assert refused(with_events(key_format="str")) == (
        "join spec #1 'views': events.key_format 'str' and dimension.key_format 'long' "
        "differ: Kafka partitions a record by its key's bytes, so a key would be in one "
        "partition of the events and another of the dimension; write both keys alike, or "
        'give one side "repartition": true'
    )
    # repartitioned: the hop writes the other side's keys (longs), whatever its own
    s = resolve(with_events(key_format="str", repartition=True))
    assert (s.events.hop_key_format, s.events.input_key_format) == ("long", "long")
    assert s.dimension.input_key_format == "long"
    both = with_events(repartition=True)
    both["dimension"]["repartition"] = True
    s = resolve(both)
    assert s.events.input_key_format == s.dimension.input_key_format == "str"


def test_a_hop_cannot_write_json_or_avro_keys():
    raw = avro_spec()
    raw["dimension"].update(key_format="avro")
    raw["events"].update(key_format="str", repartition=True)
    assert refused(raw) == (
        "join spec #1 'views': events.repartition: the hop would have to write keys as "
        "dimension.key_format 'avro', which it cannot write exactly (it writes str, long, "
        "int); repartition both sides"
    )


def test_foreign_key_sides_refuse_the_new_formats_for_now():
    raw = car_spec(Settings.model_construct())
    raw["right"] = {**raw["right"], "format": "avro"}
    with pytest.raises(SpecError, match=r"'cars': right.format 'avro': a foreign-key join"):
        resolve_fk(raw, 0)


def test_a_hop_rekeys_an_avro_record_by_its_key_field_written_as_the_other_side_writes_keys():
    with RegistryServer() as registry:
        data = avro_view(registry)
        raw = avro_spec()
        raw["events"].update(repartition=True, key_format="str")
        side = resolve(raw).events
        rekey = rekeyer(side, fetched(registry, (data, "avro")))
        assert rekey(data, None) == (struct.pack(">q", 42), 1_767_225_601_500)
        # the join then reads the repartition topic by its long keys
        parse = side.parser(fetched(registry, (data, "avro")))
        assert parse(struct.pack(">q", 42), data).user_id == "42"
        with pytest.raises(InvalidRecord, match="is not a 64-bit integer"):
            rekeyer(side, fetched(registry, (data, "avro")))(
                avro_view(registry, user={"id": "u1", "tier": None}), None
            )


def revision(spec: Any, answer: Any, previous: Any = None) -> dict[str, Any]:
    rev = Revision(
        id="v1",
        key="42",
        event_time=1_767_225_601_500,
        payload=(None, "/", 3, 1_767_225_602_123),
        answer=answer,
        answer_time=None if answer is None else 1_767_225_600_000,
        revision=1 if previous is None else 2,
        previous=previous,
        cause="arrival",
    )
    wire = spec.to_wire(rev)
    wire["partition"] = 0  # the partition whose finality promise covers it
    wire["source"] = {"topic": "views", "partition": 0, "offset": 7}
    return wire


@pytest.mark.parametrize("fmt", ["avro", "json-sr"])
def test_revisions_are_read_back_by_confluents_deserializer(fmt):
    spec = resolve({**avro_spec(), "output_format": fmt})
    with RegistryServer() as registry:
        ours = SchemaRegistry(registry.url)
        text = revision_schema(spec)
        sid = asyncio.run(ours.register(subject_of("out"), text, SCHEMA_TYPES[fmt]))
        assert registry.subjects == {"out-value": [sid]}
        assert asyncio.run(ours.register(subject_of("out"), text, SCHEMA_TYPES[fmt])) == sid
        encode = encoder(fmt, sid, text)
        client = SchemaRegistryClient({"url": registry.url})
        read = (
            AvroDeserializer(client)
            if fmt == "avro"
            else JSONDeserializer(None, schema_registry_client=client)
        )
        ctx = SerializationContext("out", MessageField.VALUE)
        for wire in (revision(spec, None), revision(spec, ("gold", 5), ("silver", 4))):
            data = encode(wire)
            assert data[:5] == b"\x00" + sid.to_bytes(4, "big")
            assert read(data, ctx) == wire  # field for field the JSON revision
        schema = json.loads(text)
        names = (
            [f["name"] for f in schema["fields"]] if fmt == "avro" else list(schema["properties"])
        )
        assert names == [*spec.output_fields, "partition", "source"]


def test_the_avro_output_schema_is_nullable_where_a_revision_may_carry_null():
    fields = {
        f["name"]: f["type"]
        for f in json.loads(revision_schema(resolve({**avro_spec(), "output_format": "avro"})))[
            "fields"
        ]
    }
    assert fields["id"] == "string" and fields["revision"] == "long"
    assert fields["plan"] == ["null", "string"] and fields["previous_plan_seats"] == [
        "null",
        "long",
    ]
    assert fields["tier_time"] == ["null", "long"] and fields["user_tier"] == ["null", "string"]
    assert fields["seen"] == "long"  # a time: epoch ms, as the JSON revisions carry it


def test_archive_writes_framed_inputs_and_outputs_as_their_json_twins(monkeypatch, tmp_path):
    """The batch twin reads archives: ``archive`` decodes a framed side with the worker's
    decoders (its keys by their key format) and an Avro revision log into JSON."""
    from app.commands import archive as A

    with RegistryServer() as registry:
        path = tmp_path / "joins.json"
        path.write_text(json.dumps([{**avro_spec(), "output_format": "avro"}]))
        s = Settings(joins_file=path, schema_registry_url=registry.url)
        monkeypatch.setattr(A, "settings", s)
        assert A.framing("views") == (None, "avro") and A.framing("out") == (None, "avro")
        assert A.framing("elsewhere") == (None, None)
        data = avro_view(registry)
        schemas = A.shared_registry(s)
        assert schemas is not None
        asyncio.run(schemas.prefetch([(framed_id(data), "avro")]))
        side = A.input_models()["views"]
        got = A.archive_value(side, struct.pack(">q", 42), data, 5)
        assert got == {
            "id": "v1",
            "user_id": "42",
            "page": "/",
            "qty": 3,
            "at": 1_767_225_601_500,
            "seen": 1_767_225_602_123,
        }
        assert A.archive_value(side, b"42", data, 5) is None  # not a long key: left out
        spec = resolve({**avro_spec(), "output_format": "avro"})
        text = revision_schema(spec)
        sid = asyncio.run(schemas.register(subject_of("out"), text, "AVRO"))
        asyncio.run(schemas.prefetch([(sid, "avro")]))
        wire = revision(spec, ("gold", 5))
        assert A.archive_value(None, b"v1", encoder("avro", sid, text)(wire), 5, "avro") == wire
        monkeypatch.setattr(A, "settings", Settings(joins_file=path))
        with pytest.raises(SpecError, match="needs a Schema Registry"):
            A.framing("views")


def test_a_backfill_refuses_to_publish_json_into_an_avro_output_before_any_spark_work():
    from argparse import Namespace

    from app.batch.subcommands import run_backfill

    spec = resolve_all([{**avro_spec(), "output_format": "avro"}])[0]
    args = Namespace(events=["e"], dimension=["d"], revisions=["r"], topic=None, dry_run=False)
    with pytest.raises(SystemExit) as exc:
        run_backfill(None, args, spec, None)  # type: ignore[arg-type]
    assert f"writes {spec.output} as avro" in str(exc.value)
    # its own JSON topic, or a dry run, passes the check (and reaches Spark: none here)
    for ok in (
        Namespace(**{**vars(args), "topic": "mine"}),
        Namespace(**{**vars(args), "dry_run": True}),
    ):
        with pytest.raises(AttributeError):  # spark is None: the check let it through
            run_backfill(None, ok, spec, None)  # type: ignore[arg-type]

"""A spec's revision log written otherwise than JSON text (``"output_format"``): Schema Registry
framed Avro (``avro``) or JSON (``json-sr``), with a schema derived from the spec and registered
under the output topic's value subject (``<output>-value``, Confluent's TopicNameStrategy), so
that a consumer with Confluent's ``AvroDeserializer`` or ``JSONDeserializer`` reads it.

The schema: the output fields in the order of
:attr:`app.joins.spec.JoinSpec.output_fields`, typed from the spec's wire models
(:func:`app.joins.columns.output_columns`: ``str`` -> string, ``int`` and ``time`` -> long
(epoch ms for a time, as the JSON revisions carry it), ``float`` -> double, ``bool`` ->
boolean), then ``source`` (the lineage: topic, partition, offset). A field is nullable
(Avro ``["null", T]``, default null) where a revision may carry null: every copied dimension
field, ``time_as`` and each ``previous_<field>`` (no version yet, in left mode or before a
correction), an optional events field, the source's offset. The values are the JSON
revision's, field for field: only the bytes differ.

No Faust: the ``archive`` command and the tests derive the same schema.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from typing import Any

import fastavro
import orjson

from app.joins.columns import output_columns
from app.joins.spec import JoinSpec

__all__ = ["OUTPUT_FORMATS", "SCHEMA_TYPES", "encoder", "revision_schema"]

#: a spec's ``output_format``s
OUTPUT_FORMATS = ("json", "json-sr", "avro")
#: the registry's schema type of each framed output format
SCHEMA_TYPES = {"avro": "AVRO", "json-sr": "JSON"}

_AVRO = {"str": "string", "int": "long", "float": "double", "bool": "boolean"}
_JSON = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def _avro_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def revision_schema(spec: JoinSpec) -> str:
    """The schema text of ``spec``'s revisions in its ``output_format`` (module docstring)."""
    columns = output_columns(spec)
    if spec.output_format == "avro":
        fields: list[dict[str, Any]] = []
        for c in columns:
            t = _AVRO[c.kind]
            fields.append(
                {"name": c.name, "type": t}
                if c.required
                else {"name": c.name, "type": ["null", t], "default": None}
            )
        # the input partition whose finality promise covers it (null: a backfill's)
        fields.append({"name": "partition", "type": ["null", "int"], "default": None})
        source = {
            "type": "record",
            "name": "Source",
            "fields": [
                {"name": "topic", "type": "string"},
                {"name": "partition", "type": "int"},
                {"name": "offset", "type": ["null", "long"], "default": None},
            ],
        }
        fields.append({"name": "source", "type": ["null", source], "default": None})
        return json.dumps(
            {
                "type": "record",
                "name": "Revision",
                "namespace": f"etj.{_avro_name(spec.name)}",
                "doc": f"A revision of join {spec.name} (docs/concepts/revision-log.md)",
                "fields": fields,
            },
            separators=(",", ":"),
        )
    if spec.output_format == "json-sr":
        props: dict[str, Any] = {
            c.name: (
                {}  # a json field: any JSON value
                if c.kind == "json"
                else {"type": _JSON[c.kind] if c.required else [_JSON[c.kind], "null"]}
            )
            for c in columns
        }
        props["partition"] = {"type": ["integer", "null"]}
        props["source"] = {
            "type": ["object", "null"],
            "properties": {
                "topic": {"type": "string"},
                "partition": {"type": "integer"},
                "offset": {"type": ["integer", "null"]},
            },
        }
        return json.dumps(
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "title": f"A revision of join {spec.name}",
                "type": "object",
                "properties": props,
                "required": [c.name for c in columns if c.required],
            },
            separators=(",", ":"),
        )
    raise ValueError(f"output_format {spec.output_format!r} has no registered schema")


def encoder(output_format: str, schema_id: int, schema: str) -> Callable[[dict[str, Any]], bytes]:
    """``revision (as the JSON output's dict) -> its bytes``: the magic byte 0, the schema id
    (4 bytes, big-endian), then the Avro binary encoding or the JSON text."""
    header = b"\x00" + schema_id.to_bytes(4, "big")
    if output_format == "json-sr":
        return lambda wire: header + orjson.dumps(wire)
    parsed = fastavro.parse_schema(json.loads(schema))
    write = fastavro.schemaless_writer

    def encode(wire: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(header)
        write(buf, parsed, wire)
        return buf.getvalue()

    return encode

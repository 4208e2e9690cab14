"""Record values and keys written otherwise than JSON text: Confluent's Schema Registry framing
(``format``: ``json-sr``, ``avro``, ``protobuf``) and binary keys (``key_format``: ``json``,
``long``, ``int``, ``avro``), decoded into what a JSON record would be, so that dotted paths,
field types and time formats apply unchanged (:func:`app.inputs.parsers.compile_shaped_parser`).

The framing (every Confluent serializer's default): byte 0 is the magic byte 0, bytes 1-4 the
writer schema's id (big-endian), then the payload: Avro's binary encoding, or Protobuf's
message-index array (zig-zag varints: how many, then the path to the message in its file; a
single 0 means the file's first message) then the message, or JSON text. The schema of an id
comes from :class:`app.kafka.schema_registry.SchemaRegistry`'s cache, fetched before the batch
is parsed; here everything is synchronous.

What a decoded value is (JSON's types, so the spec's types read it):

- Avro: a record is an object, a union its branch's value, an enum its symbol, ``long``/
  ``int`` an int, ``float``/``double`` a float; the logical types ``timestamp-millis``,
  ``timestamp-micros`` and ``timestamp-nanos`` are epoch **ms** (a ``time`` field as it is);
  every other logical type is its underlying type (``date``: days since the epoch, ``uuid``:
  a string, ``local-timestamp-*``: the number as written, no zone assumed);
- Protobuf: a message is an object of its fields by their proto names; a scalar field without
  presence is always there (proto3's default when unset), a message or ``optional`` field only
  when set; an enum is its name; ``google.protobuf.Timestamp`` is epoch ms; a wrapper
  (``google.protobuf.StringValue`` …) is its value; repeated fields are lists, maps objects;
- JSON-SR: the JSON text after the header, read as a ``json`` side's value (the registry's
  JSON Schema is fetched, so an unknown id is refused alike, but not applied: the spec's types
  are the contract).

A value or key that does not decode (no magic byte, too short, an unknown schema id, a schema
of another type, bytes the schema does not read) raises
:class:`~app.inputs.records.InvalidRecord` naming the schema id and the reason: a dead letter.
No Faust: the batch twin's ``archive`` decodes with the same functions.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from collections.abc import Callable
from typing import Any, Protocol

import fastavro
from fastavro.read import LOGICAL_READERS

from app.inputs.records import InvalidRecord, json_object, json_type
from app.kafka.schema_registry import Schema, Unknown

__all__ = [
    "FORMATS",
    "FRAMED",
    "KEY_FORMATS",
    "REHOP_KEY_FORMATS",
    "Schemas",
    "encode_key",
    "framed_id",
    "key_decoder",
    "key_text",
    "value_decoder",
]

#: a side's value formats (``format``)
FORMATS = ("json", "json-sr", "avro", "protobuf")
#: a side's record-key formats (``key_format``)
KEY_FORMATS = ("str", "json", "long", "int", "avro")
#: the formats framed by the Schema Registry (a value format, or ``avro`` keys)
FRAMED = ("json-sr", "avro", "protobuf")
#: the key formats a repartition hop writes exactly as a producer does (text, or big-endian)
REHOP_KEY_FORMATS = ("str", "long", "int")

_SCHEMA_TYPE = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-sr": "JSON"}


class Schemas(Protocol):
    """Where a decoder finds a writer schema: :meth:`SchemaRegistry.lookup`."""

    def lookup(self, schema_id: int) -> Schema | Unknown | None: ...


def framed_id(data: bytes | None) -> int | None:
    """The schema id of Confluent-framed bytes (None: not framed)."""
    if data is None or len(data) < 5 or data[0] != 0:
        return None
    return int.from_bytes(data[1:5], "big")


def _header(data: bytes | None, what: str, fmt: str) -> int:
    if data is None or data == b"":
        if what == "value":
            raise InvalidRecord("empty value (tombstone or null): nothing to join")
        raise InvalidRecord(f"record has no {what}")
    if data[0] != 0:
        raise InvalidRecord(
            f"{what} is not Schema Registry framed (format {fmt}): its first byte is "
            f"0x{data[0]:02x}, not the magic byte 0"
        )
    if len(data) < 5:
        raise InvalidRecord(
            f"{what} is not Schema Registry framed (format {fmt}): {len(data)} bytes, shorter "
            "than the 5-byte header (magic byte, schema id)"
        )
    return int.from_bytes(data[1:5], "big")


def _schema(schemas: Schemas, schema_id: int, what: str, fmt: str) -> Schema:
    got = schemas.lookup(schema_id)
    if got is None:  # the loop fetches every id before parsing: a bug, not the record's fault
        raise RuntimeError(f"schema id {schema_id} was not fetched before parsing")
    if isinstance(got, Unknown):
        raise InvalidRecord(f"{what}: schema id {schema_id}: {got.reason}")
    if got.type != _SCHEMA_TYPE[fmt]:
        raise InvalidRecord(
            f"{what}: schema id {schema_id} is a {got.type} schema, not {_SCHEMA_TYPE[fmt]} "
            f"(format {fmt})"
        )
    return got


# --- Avro -------------------------------------------------------------------------------------

#: custom logical types: an instant in a finer unit, read as epoch ms
LOGICAL_READERS["long-etj-ms-from-micros"] = lambda d, *_: d // 1000
LOGICAL_READERS["long-etj-ms-from-nanos"] = lambda d, *_: d // 1_000_000
_AS_MS = {
    "timestamp-micros": "etj-ms-from-micros",
    "timestamp-nanos": "etj-ms-from-nanos",
}


def _plain_logical(node: Any) -> Any:
    """A writer schema whose logical types read as JSON values (module docstring): the encoding
    is the same, only what the reader makes of it changes."""
    if isinstance(node, list):
        return [_plain_logical(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _plain_logical(v) for k, v in node.items() if k != "logicalType"}
    logical = node.get("logicalType")
    if logical in _AS_MS and node.get("type") == "long":
        out["logicalType"] = _AS_MS[logical]
    return out


def _avro_reader(schema: Schema) -> Callable[[bytes], Any]:
    parsed = schema.compiled.get("avro")
    if parsed is None:
        try:
            parsed = fastavro.parse_schema(_plain_logical(json.loads(schema.text)))
        except Exception as exc:  # a schema fastavro cannot read: every record of it is refused
            parsed = InvalidRecord(f"schema id {schema.id}: not an Avro schema etj can read: {exc}")
        schema.compiled["avro"] = parsed
    if isinstance(parsed, InvalidRecord):
        raise parsed
    read = fastavro.schemaless_reader

    def decode(payload: bytes) -> Any:
        fo = io.BytesIO(payload)
        value = read(fo, parsed, None)
        if fo.tell() != len(payload):
            raise ValueError(f"{len(payload) - fo.tell()} bytes left over after the record")
        return value

    return decode


def _decode_avro(schemas: Schemas, data: bytes | None, what: str) -> Any:
    schema_id = _header(data, what, "avro")
    assert data is not None
    decode = _avro_reader(_schema(schemas, schema_id, what, "avro"))
    try:
        return decode(data[5:])
    except InvalidRecord:
        raise
    except Exception as exc:  # truncated, a wrong schema, bad UTF-8: the reader's words
        raise InvalidRecord(
            f"{what}: schema id {schema_id}: does not decode as Avro: {type(exc).__name__}: "
            f"{str(exc)[:120] or 'truncated'}"
        ) from None


# --- Protobuf ---------------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``: (its value, the position after it)."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("the message-index array is truncated")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos


def _proto_file(schema: Schema) -> Any:
    """(pool, the schema's FileDescriptorProto) of a Protobuf schema, its imports added first."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    names: set[str] = set()

    def add(serialized: bytes) -> Any:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(serialized)
        for dep in fdp.dependency:
            if dep not in names and dep.startswith("google/"):
                _add_well_known(pool, dep, names)
        if fdp.name not in names:
            pool.AddSerializedFile(serialized)
            names.add(fdp.name)
        return fdp

    for _, text in schema.references:
        add(base64.b64decode(text))
    return pool, add(base64.b64decode(schema.text))


def _add_well_known(pool: Any, name: str, names: set[str]) -> None:
    """A file of Google's well-known types (a serializer registers no reference to them)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    try:
        fd = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        _import_well_known(name)
        try:
            fd = descriptor_pool.Default().FindFileByName(name)
        except KeyError:
            return  # the pool then says which import is missing
    for dep in fd.dependencies:
        if dep.name not in names:
            _add_well_known(pool, dep.name, names)
    fdp = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(fdp)
    pool.AddSerializedFile(fdp.SerializeToString())
    names.add(name)


def _import_well_known(name: str) -> None:
    import importlib

    module = name.removesuffix(".proto").replace("/", ".") + "_pb2"
    try:
        importlib.import_module(module)
    except ImportError:
        pass


def _proto_class(schema: Schema, index: tuple[int, ...]) -> Any:
    """The message class at ``index`` of a Protobuf schema (made once per schema and index)."""
    from google.protobuf import message_factory

    classes = schema.compiled.setdefault("protobuf", {})
    cls = classes.get(index)
    if cls is None:
        if "pool" not in schema.compiled:
            try:
                schema.compiled["pool"] = _proto_file(schema)
            except Exception as exc:
                schema.compiled["pool"] = InvalidRecord(
                    f"schema id {schema.id}: not a Protobuf schema etj can read: {exc}"
                )
        made = schema.compiled["pool"]
        if isinstance(made, InvalidRecord):
            raise made
        pool, fdp = made
        try:
            node = fdp.message_type[index[0]]
            name = node.name
            for i in index[1:]:
                node = node.nested_type[i]
                name += "." + node.name
        except IndexError:
            raise InvalidRecord(
                f"schema id {schema.id}: message index {list(index)} names no message of it"
            ) from None
        full = f"{fdp.package}.{name}" if fdp.package else name
        cls = classes[index] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
    return cls


_WRAPPERS = frozenset(
    f"google.protobuf.{t}Value"
    for t in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)


def _proto_value(fd: Any, value: Any) -> Any:
    if fd.message_type is not None:
        return _proto_message(value)
    if fd.enum_type is not None:
        named = fd.enum_type.values_by_number.get(value)
        return value if named is None else named.name
    return value


def _proto_message(msg: Any) -> Any:
    """A message as the JSON value a record of it would be (module docstring)."""
    desc = msg.DESCRIPTOR
    full = desc.full_name
    if full == "google.protobuf.Timestamp":
        return msg.seconds * 1000 + msg.nanos // 1_000_000
    if full in _WRAPPERS:
        return msg.value
    out: dict[str, Any] = {}
    for fd in desc.fields:
        name = fd.name
        value = getattr(msg, name)
        if fd.is_repeated:
            if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
                vfd = fd.message_type.fields_by_name["value"]
                out[name] = {str(k): _proto_value(vfd, v) for k, v in value.items()}
            else:
                out[name] = [_proto_value(fd, v) for v in value]
        elif fd.has_presence and not msg.HasField(name):
            continue
        else:
            out[name] = _proto_value(fd, value)
    return out


def _decode_protobuf(schemas: Schemas, data: bytes | None, what: str) -> Any:
    schema_id = _header(data, what, "protobuf")
    assert data is not None
    schema = _schema(schemas, schema_id, what, "protobuf")
    try:
        count, pos = _varint(data, 5)
        if count < 0 or count > 100:
            raise ValueError(f"a message-index array of {count} entries")
        index: list[int] = []
        for _ in range(count):
            i, pos = _varint(data, pos)
            index.append(i)
    except ValueError as exc:
        raise InvalidRecord(
            f"{what}: schema id {schema_id}: not a Protobuf message: {exc}"
        ) from None
    cls = _proto_class(schema, tuple(index) or (0,))
    try:
        msg = cls.FromString(data[pos:])
    except Exception as exc:
        raise InvalidRecord(
            f"{what}: schema id {schema_id}: does not decode as {cls.DESCRIPTOR.full_name}: "
            f"{str(exc)[:120]}"
        ) from None
    return _proto_message(msg)


# --- JSON Schema ------------------------------------------------------------------------------


def _decode_json_sr(schemas: Schemas, data: bytes | None, what: str) -> Any:
    schema_id = _header(data, what, "json-sr")
    assert data is not None
    _schema(schemas, schema_id, what, "json-sr")
    try:
        return json_object(data[5:])
    except InvalidRecord as exc:
        raise InvalidRecord(f"{what}: schema id {schema_id}: {exc}") from None


_DECODERS = {"avro": _decode_avro, "protobuf": _decode_protobuf, "json-sr": _decode_json_sr}


def value_decoder(fmt: str, schemas: Schemas) -> Callable[[bytes | None], dict[str, Any]]:
    """``value bytes -> the record as a JSON object`` of a framed ``format``; raises
    :class:`InvalidRecord`.

    Avro, the hot path: per schema id, the parsed schema's reader is kept by the decoder (a
    schema id's schema never changes), so a record costs the header check, a dict lookup and
    fastavro's read (~2 µs for a flat record of five fields, where looking the schema up and
    making the reader per record was ~7 µs); anything else takes the general path, which says
    why it refuses."""
    decode = _DECODERS[fmt]

    def general(value: bytes | None) -> dict[str, Any]:
        data = decode(schemas, value, "value")
        if not isinstance(data, dict):
            raise InvalidRecord(
                f"value: schema id {framed_id(value)}: a {json_type(data)}, not a record"
            )
        return data

    if fmt != "avro":
        return general
    readers: dict[int, Any] = {}
    read = fastavro.schemaless_reader
    BytesIO = io.BytesIO

    def decode_avro_value(value: bytes | None) -> dict[str, Any]:
        if value is None or len(value) < 5 or value[0] != 0:
            return general(value)
        reader = readers.get(int.from_bytes(value[1:5], "big"))
        if reader is None:
            got = schemas.lookup(int.from_bytes(value[1:5], "big"))
            if not isinstance(got, Schema) or got.type != "AVRO":
                return general(value)  # unknown, or another type: it says so
            try:
                _avro_reader(got)  # parsed once, kept on the schema
            except InvalidRecord:
                return general(value)
            if len(readers) >= 1_000:
                readers.clear()
            reader = readers[got.id] = got.compiled["avro"]
        fo = BytesIO(value)
        fo.seek(5)
        try:
            data = read(fo, reader, None)
        except Exception:
            return general(value)  # the general path says why
        if fo.tell() != len(value) or type(data) is not dict:
            return general(value)
        return data

    return decode_avro_value


# --- keys -------------------------------------------------------------------------------------


def key_text(value: Any) -> str:
    """The canonical text of a decoded key, which must equal the key field's text: a string as
    it is, an integer in decimal, a record (object) of one field as that field; anything else
    raises :class:`InvalidRecord`."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, dict) and len(value) == 1:
        return key_text(next(iter(value.values())))
    kind = f"a record of {len(value)} fields" if isinstance(value, dict) else json_type(value)
    raise InvalidRecord(f"key is {kind}: a key is a string, an integer, or a record of one field")


def _long_key(key: bytes) -> bytes:
    if len(key) != 8:
        raise InvalidRecord(
            f"key is not a long (key_format long: 8 bytes, big-endian): {len(key)} bytes"
        )
    return str(struct.unpack(">q", key)[0]).encode()


def _int_key(key: bytes) -> bytes:
    if len(key) != 4:
        raise InvalidRecord(
            f"key is not an int (key_format int: 4 bytes, big-endian): {len(key)} bytes"
        )
    return str(struct.unpack(">i", key)[0]).encode()


def _json_key(key: bytes) -> bytes:
    try:
        value = json.loads(key)
    except ValueError as exc:  # UnicodeDecodeError included
        raise InvalidRecord(f"key is not JSON (key_format json): {exc}") from None
    return key_text(value).encode()


def key_decoder(
    key_format: str, schemas: Schemas | None
) -> Callable[[bytes | None], bytes | None] | None:
    """``record key -> its canonical text as UTF-8`` (None: a missing key, which the parser
    refuses saying so); None for ``str`` (the key is its text)."""
    if key_format == "str":
        return None
    if key_format == "avro":
        assert schemas is not None

        def decode(key: bytes) -> bytes:
            return key_text(_decode_avro(schemas, key, "key")).encode()

    else:
        decode = {"long": _long_key, "int": _int_key, "json": _json_key}[key_format]

    def decode_key(key: bytes | None) -> bytes | None:
        return None if key is None else decode(key)

    return decode_key


def encode_key(text: str, key_format: str) -> bytes:
    """A key's canonical text written in ``key_format`` (one of :data:`REHOP_KEY_FORMATS`), as
    Kafka's String, Long and Integer serializers write it; raises :class:`InvalidRecord` for a
    text that is not such a number."""
    if key_format == "str":
        return text.encode()
    bits, fmt = (64, ">q") if key_format == "long" else (32, ">i")
    try:
        n = int(text)
        if str(n) != text:
            raise ValueError(text)
        return struct.pack(fmt, n)
    except (ValueError, struct.error):
        raise InvalidRecord(
            f"key {text[:60]!r} is not a {bits}-bit integer: the join's other side is keyed "
            f"by {key_format}s (key_format {key_format})"
        ) from None

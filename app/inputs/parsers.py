"""Wire records parsed at speed: a side's parser, (key, value[, timestamp]) -> the record, or
:class:`~app.inputs.records.InvalidRecord` with the reason :func:`app.inputs.records.parse`
gives. :func:`compile_parser` reads a flat record with msgspec; :func:`compile_shaped_parser`
reads a record shaped otherwise (nested fields, an event time in another format, the Kafka
timestamp) into its flat record. Neither refuses anything on its own: what the fast path
cannot vouch for goes to :func:`~app.inputs.records.parse`.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
import orjson
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import ValidationError
from pydantic.types import AllowInfNan

from app.inputs.paths import MISSING, header_name, read_header, read_parts, split_path
from app.inputs.records import (
    InvalidRecord,
    M,
    WireModel,
    check_record_key,
    json_object,
    parse,
    validation_reason,
)
from app.inputs.time_formats import KAFKA_TIMESTAMP, convert_time

# --- the fast path: msgspec, with app.inputs.records.parse as the judge of every refusal -------
#
# Why: ``parse`` costs ~9 µs a record (the standard library's JSON with a Python hook per object,
# then pydantic); msgspec decodes and validates a flat record in ~1 µs. The rules must stay
# exactly these (strict types, bounds, the key check, a field named twice refused, unknown
# fields ignored), so the fast path only ever *accepts*: whatever it cannot vouch for — a value
# it refuses, a duplicate it cannot rule out, a constraint it does not know — goes to ``parse``,
# which accepts or refuses it with today's reason. tests/unit/test_fast_parse.py holds the two
# against each other on generated and hostile inputs (same accept/refuse, values and reason).

#: a record as the engines see it: a msgspec Struct (or the pydantic model for a model the fast
#: path cannot express), read by attribute
Parser = Callable[["bytes | None", "bytes | None"], Any]

#: ``"`` then JSON whitespace then ``:``: every object key ends so (and may be counted more
#: than once only by matching inside a string or a nested object, never less)
_KEY_END = re.compile(rb'"[ \t\n\r]*:')
#: a key end with whitespace in it (then '":' alone does not count every key)
_SPACED_KEY_END = re.compile(rb'"[ \t\n\r]+:')


class _Unsupported(Exception):
    """A model the fast path cannot express exactly: ``parse`` alone validates it."""


def _meta(metadata: list[Any]) -> tuple[dict[str, Any], bool, bool]:
    """(msgspec.Meta kwargs, finite only, -0.0 -> 0.0) of a pydantic field's metadata."""
    meta: dict[str, Any] = {}
    finite = negzero = False
    for m in metadata:
        if isinstance(m, MinLen):
            meta["min_length"] = m.min_length
        elif isinstance(m, MaxLen):
            meta["max_length"] = m.max_length
        elif isinstance(m, Ge):
            meta["ge"] = m.ge
        elif isinstance(m, Gt):
            meta["gt"] = m.gt
        elif isinstance(m, Le):
            meta["le"] = m.le
        elif isinstance(m, Lt):
            meta["lt"] = m.lt
        elif isinstance(m, AllowInfNan):
            finite = not m.allow_inf_nan
        elif (
            type(m).__name__ == "AfterValidator"
            and getattr(m.func, "__name__", "") == "_no_negative_zero"
        ):
            negzero = True
        else:
            raise _Unsupported(f"metadata {m!r}")
    return meta, finite, negzero


def _field_type(annotation: Any, metadata: list[Any]) -> tuple[Any, bool, bool]:
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) != 1 or len(get_args(annotation)) != 2:
            raise _Unsupported(f"type {annotation!r}")
        annotation, optional = args[0], True
    extra: list[Any] = []
    if get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        extra = [x for e in extra for x in (getattr(e, "metadata", None) or [e])]
    meta, finite, negzero = _meta([*metadata, *extra])
    if annotation in (str, int, bool) or get_origin(annotation) is Literal:
        base: Any = annotation
    elif annotation is float:
        base = float
    else:
        raise _Unsupported(f"type {annotation!r}")
    if annotation is bool and meta:
        raise _Unsupported("constraints on a bool")
    typ = Annotated[base, msgspec.Meta(**meta)] if meta else base
    return (typ | None if optional else typ), finite, negzero


def _struct_for(
    model: type[WireModel],
) -> tuple[type[msgspec.Struct], tuple[str, ...], tuple[str, ...]]:
    decorators = model.__pydantic_decorators__
    if (decorators.model_validators or decorators.field_validators) and getattr(
        model, "fast_check", None
    ) is None:
        raise _Unsupported("validators without a fast_check")
    if model.model_config.get("extra") != "ignore" or not model.model_config.get("strict"):
        raise _Unsupported("not a strict WireModel")
    fields: list[tuple[Any, ...]] = []
    finite, negzero = [], []
    for name, info in model.model_fields.items():
        if info.alias not in (None, name) or info.default_factory is not None:
            raise _Unsupported(f"field {name}")
        typ, fin, nz = _field_type(info.annotation, list(info.metadata))
        if fin:
            finite.append(name)
        if nz:
            negzero.append(name)
        fields.append((name, typ) if info.is_required() else (name, typ, info.default))
    # gc=False: a record's fields are strings, numbers, booleans and None (``_field_type``
    # refuses any other), which never make a cycle, so the collector need not track one
    # object per record it parses (issue 47: ~30 tracked objects per record, ~4 µs of
    # collections)
    struct = msgspec.defstruct(f"{model.__name__}Fast", fields, kw_only=True, frozen=True, gc=False)
    return struct, tuple(finite), tuple(negzero)


def compile_parser(model: type[M], check_key: bool = True) -> Parser:
    """``parse(model, ·, ·)`` at C speed: (key, value) -> the record as a Struct, or
    :class:`InvalidRecord` raised with :func:`parse`'s reason. A model the fast path cannot
    express exactly is parsed by :func:`parse` alone. ``check_key`` False: whatever its key
    (a repartitioned side's own topic)."""
    try:
        struct, finite, negzero = _struct_for(model)
    except _Unsupported:

        def parse_slow(
            key: bytes | None, value: bytes | None, timestamp: Any = None, headers: Any = None
        ) -> Any:
            return parse(model, key, value, check_key)

        return parse_slow
    decode = msgspec.json.Decoder(struct).decode
    key_field = model.key_field
    key_fields = model.key_fields
    check = getattr(model, "fast_check", None)
    fix = msgspec.structs.replace
    count = _KEY_END.findall
    spaced = _SPACED_KEY_END.search
    required = sum(1 for info in model.model_fields.values() if info.is_required())
    optional = tuple(n for n, info in model.model_fields.items() if not info.is_required())

    def slow(key: bytes | None, value: bytes | None) -> Any:
        rec = parse(model, key, value, check_key)  # raises with the reason, or accepts
        return struct(**rec.model_dump())

    def parse_fast(
        key: bytes | None, value: bytes | None, timestamp: Any = None, headers: Any = None
    ) -> Any:
        # (timestamp, headers: unused, taken so that every side's parser has one signature and
        # a flat side's is this function itself, with no wrapper call per record)
        if not value or (key is None and check_key):
            return slow(key, value)
        try:
            rec = decode(value)
        except (ValueError, TypeError, RecursionError):  # not JSON, not UTF-8, too deep, a
            return slow(key, value)  # type or a bound: parse says why
        # A field named twice? Every key ends with '"', JSON whitespace, ':' — counted, that
        # is at least the object's keys (more only inside strings or nested objects). The
        # fields the record has (its required ones, its optional ones not null) are at most
        # its distinct keys. Equal: no key is there twice (and no unknown field either, which
        # is then left to parse: the rule is the same, only slower).
        if spaced(value) is None:  # every key ends '":' exactly
            keys = value.count(b'":')
        else:
            keys = len(count(value))
        present = required
        for f in optional:
            if getattr(rec, f) is not None:
                present += 1
        if keys != present:
            return slow(key, value)
        for f in finite:
            v = getattr(rec, f)
            if v is not None and not math.isfinite(v):
                return slow(key, value)
        if negzero:
            zeros = {f: 0.0 for f in negzero if getattr(rec, f) == 0.0}
            if zeros:
                rec = fix(rec, **zeros)
        if check is not None and not check(rec):
            return slow(key, value)
        if not check_key:
            return rec
        if key_fields:  # a composite key: the JSON array of its parts
            if key != orjson.dumps([getattr(rec, f) for f in key_fields]):
                return slow(key, value)
        elif key != str(getattr(rec, key_field)).encode():  # equal bytes: equal text; else
            return slow(key, value)  # parse compares it as text
        return rec

    return parse_fast


def as_dict(record: Any) -> dict[str, Any]:
    """A parsed record's fields (Struct or pydantic model)."""
    if isinstance(record, msgspec.Struct):
        return msgspec.structs.asdict(record)
    return record.model_dump()


# --- records shaped otherwise: nested fields, event times in other units, the Kafka timestamp ---
#
# Why a second parser: a spec side whose fields are all top-level and whose event time is epoch
# ms is parsed by :func:`compile_parser` exactly as before (no cost added). A side that names a
# dotted path (``"user.id"``), an event time in another format, or the record's Kafka timestamp
# is parsed here: the JSON value is decoded (a field named twice refused, as :func:`parse`
# does), each path is read into its flat field (``user.id`` -> ``user_id``, or the name the
# spec gives it), the event time is converted to epoch ms, and the flat record is validated by
# the side's flat model. The engine (and the batch twin, through ``archive``) then sees the
# flat record only.


def _count_keys(node: Any) -> int:
    """The keys of every object in a decoded JSON value (nested ones too)."""
    n = 0
    if type(node) is dict:
        n = len(node)
        node = node.values()
    elif type(node) is not list:
        return 0
    for v in node:
        if type(v) is dict or type(v) is list:
            n += _count_keys(v)
    return n


def _fast_object(value: bytes | None) -> dict[str, Any] | None:
    """A record value as :func:`app.inputs.records.json_object` reads it, decoded by msgspec
    (~0.6 µs, where the standard library's parser with a hook per object was ~6 µs); None when
    this cannot vouch for it: a value msgspec refuses (the standard parser then accepts or says
    why), not an object, or a field that may be named twice. As :func:`compile_parser`'s fast
    path counts it: no key end with whitespace in it, and as many ``":`` as the decoded objects
    have keys (a key named twice in one object leaves that object one key short)."""
    if not value:
        return None
    try:
        data = msgspec.json.decode(value)
        if (
            type(data) is not dict
            or _SPACED_KEY_END.search(value) is not None
            or value.count(b'":') != _count_keys(data)
        ):
            return None
    except (ValueError, TypeError, RecursionError):
        return None
    return data


def compile_shaped_parser(
    model: type[M],
    paths: dict[str, str],
    time_field: str,
    time_format: str | None,
    from_timestamp: bool,
    decode: Callable[[bytes | None], dict[str, Any]] | None = None,
    check_key: bool = True,
) -> Callable[..., Any]:
    """A parser for a side shaped otherwise (see above): (key, value, timestamp, headers) ->
    the flat record, or :class:`InvalidRecord` whose reason names the spec's path. ``paths``:
    flat field -> its path (:mod:`app.inputs.paths`: names, ``$header.<name>``; the time field
    absent when ``from_timestamp``); ``time_format``: how the time field is converted (None:
    not at all, an integer of epoch ms); ``timestamp``: the record's Kafka timestamp in epoch
    ms (None: it has none); ``headers``: its Kafka headers, (name, bytes) pairs. ``decode``:
    the value's bytes -> its JSON object, for a value written otherwise than JSON text
    (:func:`app.inputs.wire_formats.value_decoder`); ``check_key`` False: the record key is
    not compared (a repartition hop's read, :mod:`app.joins.rekey`)."""
    # (flat field, path, the names of a value path, or () and the header's name)
    items: list[tuple[str, str, tuple[str, ...], str]] = []
    for f, path in paths.items():
        header = header_name(path)
        items.append((f, path, () if header is not None else split_path(path), header or ""))
    to_path = dict(paths)
    if from_timestamp:
        to_path[time_field] = KAFKA_TIMESTAMP
    key_name = model.key_name or to_path.get(model.key_field, model.key_field)
    name = model.__name__
    # a decoded value (Avro, Protobuf: app.inputs.wire_formats) is validated by msgspec's
    # convert at C speed (~0.7 µs, where pydantic took ~5 µs a record), which only ever
    # accepts, as compile_parser's fast path: what it refuses, and what it cannot vouch for
    # (a float that is not finite, a model validator's check), goes to the model, which says
    # why (or accepts: the record is then the same Struct)
    fast: tuple[Any, tuple[str, ...], tuple[str, ...]] | None = None
    if decode is not None:
        try:
            fast = _struct_for(model)
        except _Unsupported:
            fast = None
    check = getattr(model, "fast_check", None)
    #: every field top-level, the time in epoch ms: the decoded object is the flat record
    #: (its other fields ignored, as the model ignores them)
    as_is = (
        fast is not None
        and not from_timestamp
        and time_format is None
        and all(f == p and not h for f, p, _, h in items)
    )

    def converted(flat: dict[str, Any]) -> Any:
        """The flat record as the Struct, or None: let the model judge it."""
        assert fast is not None
        struct, finite, negzero = fast
        try:
            rec = msgspec.convert(flat, struct, strict=True)
        except msgspec.ValidationError:
            return None
        for f in finite:
            v = getattr(rec, f)
            if v is not None and not math.isfinite(v):
                return None
        if negzero:
            zeros = {f: 0.0 for f in negzero if getattr(rec, f) == 0.0}
            if zeros:
                rec = msgspec.structs.replace(rec, **zeros)
        if check is not None and not check(rec):
            return None
        return rec

    def parse_shaped(
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Any = None,
    ) -> Any:
        data = decode(value) if decode is not None else _fast_object(value)
        if data is None:
            data = json_object(value)  # accepts, or says why not
        if as_is:
            return keyed(key, data)
        flat: dict[str, Any] = {}
        for f, path, parts, header in items:
            if header:
                got = read_header(headers, header)
            elif len(parts) == 1:
                got = data.get(parts[0], MISSING)
            else:
                got = read_parts(data, parts, path)
            if got is not MISSING:
                flat[f] = got
        if from_timestamp:
            if timestamp is None or timestamp < 0:
                raise InvalidRecord(f"{KAFKA_TIMESTAMP}: the record has no Kafka timestamp")
            flat[time_field] = timestamp
        elif time_format is not None and time_field in flat:
            try:
                flat[time_field] = convert_time(flat[time_field], time_format)
            except InvalidRecord as exc:
                raise InvalidRecord(
                    f"invalid {name}: {to_path[time_field]}: {exc} (time_format {time_format})"
                ) from None
        return keyed(key, flat)

    def keyed(key: bytes | None, flat: dict[str, Any]) -> Any:
        """The flat record validated, its key compared with the record key."""
        record = None if fast is None else converted(flat)
        if record is None:
            try:
                record = model.model_validate(flat)
            except ValidationError as exc:
                raise InvalidRecord(f"invalid {name}: {validation_reason(exc, to_path)}") from exc
            if fast is not None:  # one type of record per side, whichever path took it
                record = fast[0](**record.model_dump())
        if not check_key:
            return record
        check_record_key(key, record, model, key_name)
        return record

    return parse_shaped

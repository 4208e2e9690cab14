"""Wire records (docs/joins/topics.md) and their validation.

Inputs are consumed as raw bytes and validated here, not by Faust's codecs: a record that fails
must become a dead letter with a reason a person understands, never an exception in an agent.
Rules (docs/concepts/guarantees.md#input-rules):
- values are UTF-8 JSON objects; unknown extra fields are ignored; a field named twice is
  refused (JSON parsers disagree on which one wins, so stream and batch could disagree);
- types are strict (``"5"`` is not an int, ``true`` is not an int);
- event times are epoch ms in [0, 2100-01-01);
- the record key must equal the value's key field (co-partitioning depends on it).
"""

from __future__ import annotations

import json
import math
import re
import types
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

import msgspec
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.types import AllowInfNan

#: 2100-01-01T00:00:00Z in epoch ms: anything later is an absurd event time (a seconds/µs mix-up)
MAX_EVENT_TIME = 4_102_444_800_000

EventTime = Field(ge=0, lt=MAX_EVENT_TIME)


class InvalidRecord(ValueError):
    """A record that cannot be processed; ``str(exc)`` is the dead-letter reason."""


class WireModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    #: name of the field the record key must equal
    key_field: ClassVar[str] = ""


class MoodIn(WireModel):
    """``etj-moods``: a consultant's mood from ``event_time`` on."""

    name: str = Field(min_length=1, max_length=200)
    mood: str = Field(min_length=1, max_length=200)
    event_time: int = EventTime
    ingestion_time: int | None = None

    key_field: ClassVar[str] = "name"


class RecommendationIn(WireModel):
    """``etj-events``: a recommendation a consultant made at ``event_time``."""

    consultant: str = Field(min_length=1, max_length=200)
    recommendation: str = Field(min_length=1, max_length=10_000)
    event_time: int = EventTime
    id: str | None = Field(None, min_length=1, max_length=200)
    ingestion_time: int | None = None

    key_field: ClassVar[str] = "consultant"


M = TypeVar("M", bound=WireModel)


def _describe(exc: ValidationError, paths: dict[str, str] | None = None) -> str:
    """A validation error in words; ``paths`` (flat field -> the spec's dotted path) names a
    nested field by its path."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "value"
        if paths:
            loc = paths.get(loc, loc)
        if err["type"] == "missing":
            parts.append(f"{loc}: missing")
            continue
        got = err.get("input")
        shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
        parts.append(f"{loc}: {err['msg']} (got {shown[:60]})")
    return "; ".join(parts)


def _no_duplicate_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InvalidRecord(f"duplicate field {k[:60]!r} in the JSON object")
        out[k] = v
    return out


def _json_type(data: Any) -> str:
    """The JSON name of a decoded value's type (a person reads 'null', not 'NoneType')."""
    if data is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}.get(
        type(data), type(data).__name__
    )


def parse(model: type[M], key: bytes | None, value: bytes | None) -> M:
    """Decode and validate one record, or raise :class:`InvalidRecord` saying why."""
    data = _json_object(value)
    try:
        record = model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRecord(f"invalid {model.__name__}: {_describe(exc)}") from exc
    expected = getattr(record, record.key_field)
    if key is None:
        raise InvalidRecord(f"record has no key; it must be keyed by {record.key_field}")
    key_text = key.decode("utf-8", errors="replace")
    if key_text != str(expected):
        raise InvalidRecord(
            f"key {key_text[:60]!r} disagrees with {record.key_field} {str(expected)[:60]!r}"
        )
    return record


# --- car join (docs/joins/topics.md: etj-car-arrivals, etj-zones, internal car moves) ---------------------
#: ids are non-negative signed 64-bit integers: a Java/Spark ``long`` holds them, and app.state.ordered_keys
#: encodes them (it supports the whole int64 range; the wire contract keeps negatives out).
MAX_ID = 2**63 - 1


def _no_negative_zero(x: float) -> float:
    return x + 0.0  # -0.0 -> 0.0: equal values must serialize the same way


Id = Annotated[int, Field(ge=0, le=MAX_ID)]
#: a finite float (NaN and ±Infinity, which Python's JSON parser accepts, are refused)
FiniteFloat = Annotated[float, Field(allow_inf_nan=False), AfterValidator(_no_negative_zero)]


class CarArrivalIn(WireModel):
    """``etj-car-arrivals``: car ``car_id`` arrived in zone ``to_zone_id`` at ``event_time``."""

    car_id: Id
    to_zone_id: Id
    fuel_level: FiniteFloat
    event_time: int = EventTime

    key_field: ClassVar[str] = "car_id"


class ZoneIn(WireModel):
    """``etj-zones``: zone ``zone_id`` has ``pollution_level`` from ``event_time`` on."""

    zone_id: Id
    pollution_level: FiniteFloat
    event_time: int = EventTime

    key_field: ClassVar[str] = "zone_id"


class CarMoveIn(WireModel):
    """Internal car moves, keyed by ``zone_id``: ADD (car now in the zone) or DEL (it left).

    ``to_zone_id``/``fuel_level``/``event_time`` are those of the arrival that caused the move.
    """

    op: Literal["ADD", "DEL"]
    zone_id: Id
    car_id: Id
    to_zone_id: Id
    fuel_level: FiniteFloat
    event_time: int = EventTime

    key_field: ClassVar[str] = "zone_id"

    @staticmethod
    def fast_check(rec: Any) -> bool:
        """:meth:`_op_matches_zones` for :func:`compile_parser`'s fast path (False: let the
        model say why)."""
        return (rec.op == "ADD") == (rec.to_zone_id == rec.zone_id)

    @model_validator(mode="after")
    def _op_matches_zones(self) -> CarMoveIn:
        if (self.op == "ADD") != (self.to_zone_id == self.zone_id):
            raise ValueError("an ADD is addressed to its arrival's zone, a DEL to another one")
        return self


# --- the fast path: msgspec, with this module's parser as the judge of every refusal -----------
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


def compile_parser(model: type[M]) -> Parser:
    """``parse(model, ·, ·)`` at C speed: (key, value) -> the record as a Struct, or
    :class:`InvalidRecord` raised with :func:`parse`'s reason. A model the fast path cannot
    express exactly is parsed by :func:`parse` alone."""
    try:
        struct, finite, negzero = _struct_for(model)
    except _Unsupported:
        return lambda key, value, timestamp=None: parse(model, key, value)
    decode = msgspec.json.Decoder(struct).decode
    key_field = model.key_field
    check = getattr(model, "fast_check", None)
    fix = msgspec.structs.replace
    count = _KEY_END.findall
    spaced = _SPACED_KEY_END.search
    required = sum(1 for info in model.model_fields.values() if info.is_required())
    optional = tuple(n for n, info in model.model_fields.items() if not info.is_required())

    def slow(key: bytes | None, value: bytes | None) -> Any:
        rec = parse(model, key, value)  # raises with the reason, or accepts
        return struct(**rec.model_dump())

    def parse_fast(key: bytes | None, value: bytes | None, timestamp: Any = None) -> Any:
        # (timestamp: unused, taken so that every side's parser has one signature and a flat
        # side's is this function itself, with no wrapper call per record)
        if not value or key is None:
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
        if key != str(getattr(rec, key_field)).encode():  # equal bytes: equal text; else
            return slow(key, value)  # parse compares it as text
        return rec

    return parse_fast


def as_dict(record: Any) -> dict[str, Any]:
    """A parsed record's fields (Struct or pydantic model)."""
    if isinstance(record, msgspec.Struct):
        return msgspec.structs.asdict(record)
    return record.model_dump()  # type: ignore[no-any-return]


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

#: the event-time formats a spec side may declare (``time_format``)
TIME_FORMATS = ("epoch_ms", "epoch_s", "epoch_us", "iso8601")
#: the time source that reads the Kafka record timestamp instead of a field
KAFKA_TIMESTAMP = "$timestamp"

#: ISO-8601 as etj reads it: date, ``T`` or a space, time to the second, an optional fraction
#: (truncated to the millisecond), and a zone (``Z`` or ``±HH:MM``) that is required: a time
#: without one means a different instant in every time zone
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:(Z)|([+-])(\d{2}):(\d{2}))"
)
_ISO_NO_ZONE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?")


#: the proleptic Gregorian ordinal of 1970-01-01 (``datetime.date(1970, 1, 1).toordinal()``)
_EPOCH_DAY = 719_163


def iso_to_ms(text: str) -> int:
    """Epoch ms of an ISO-8601 time with a zone (the fraction truncated to the ms); raises
    :class:`InvalidRecord` saying why not.

    A time whose every part is in range is counted in integers (a day's ordinal, seconds, the
    zone's offset): ~1 µs, where building an aware ``datetime`` for it was ~3 µs a record. Any
    other goes the ``datetime`` way, whose error names what is wrong."""
    import datetime as dt

    m = _ISO.fullmatch(text)
    if m is not None:
        y, mo, d, h, mi, s, frac, z, sign, oh, om = m.groups()
        hour, minute, second = int(h), int(mi), int(s)
        off_h, off_m = (0, 0) if z else (int(oh), int(om))
        if hour < 24 and minute < 60 and second < 60 and off_h < 24 and off_m < 60:
            try:
                days = dt.date(int(y), int(mo), int(d)).toordinal() - _EPOCH_DAY
            except ValueError:
                pass  # the datetime way says why
            else:
                offset = 0 if z else (1 if sign == "+" else -1) * (off_h * 3600 + off_m * 60)
                seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
                return seconds * 1000 + (int(frac[:3].ljust(3, "0")) if frac else 0)
    if m is None:
        if _ISO_NO_ZONE.fullmatch(text):
            raise InvalidRecord(
                f"{text[:60]!r} has no time zone (add 'Z' or an offset such as "
                "'+02:00'): it would be a different instant in every zone"
            )
        raise InvalidRecord(
            f"{text[:60]!r} is not an ISO-8601 time (YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM))"
        )
    y, mo, d, h, mi, s, frac, z, sign, oh, om = m.groups()
    try:
        offset = (
            dt.timedelta(0)
            if z
            else (1 if sign == "+" else -1) * dt.timedelta(hours=int(oh), minutes=int(om))
        )
        when = dt.datetime(
            int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=dt.timezone(offset)
        )
    except ValueError as exc:
        raise InvalidRecord(f"{text[:60]!r} is not a valid time: {exc}") from None
    ms = int(when.timestamp()) * 1000 + int((frac or "0")[:3].ljust(3, "0"))
    return ms


def convert_time(raw: Any, time_format: str) -> Any:
    """The event time in epoch ms of a field written in ``time_format``; a value that is not
    one is returned as it is (the flat model's ``time`` check then refuses it by type), and
    :class:`InvalidRecord` is raised for one that has the type but not a time's form.

    The rules (the batch twin's archive applies the same function): ``epoch_s``: an int or a
    finite float, ``floor(s * 1000 + 0.5)``; ``epoch_us``: an int, ``us // 1000``; a negative
    epoch is refused before converting; ``iso8601``: :func:`iso_to_ms`."""
    if time_format == "epoch_ms" or raw is None or isinstance(raw, bool):
        return raw
    if time_format == "iso8601":
        return iso_to_ms(raw) if isinstance(raw, str) else raw
    if time_format == "epoch_s" and isinstance(raw, (int, float)):
        if not math.isfinite(raw) or raw < 0:
            raise InvalidRecord(f"{raw!r} is not an epoch time in seconds (negative or not finite)")
        return math.floor(raw * 1000 + 0.5)
    if time_format == "epoch_us" and isinstance(raw, int):
        if raw < 0:
            raise InvalidRecord(f"{raw!r} is not an epoch time in microseconds (negative)")
        return raw // 1000
    return raw


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
    """A record value as :func:`_json_object` reads it, decoded by msgspec (~0.6 µs, where the
    standard library's parser with a hook per object was ~6 µs); None when this cannot vouch
    for it: a value msgspec refuses (the standard parser then accepts or says why), not an
    object, or a field that may be named twice. As :func:`compile_parser`'s fast path counts
    it: no key end with whitespace in it, and as many ``":`` as the decoded objects have keys
    (a key named twice in one object leaves that object one key short)."""
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
    return data  # type: ignore[no-any-return]


def _json_object(value: bytes | None) -> dict[str, Any]:
    """A record value as a JSON object, or :class:`InvalidRecord` saying why not (the judge of
    every refusal, flat and shaped sides alike)."""
    if value is None or value == b"":
        raise InvalidRecord("empty value (tombstone or null): nothing to join")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(f"value is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    try:
        data: Any = json.loads(text, object_pairs_hook=_no_duplicate_fields)
    except InvalidRecord:
        raise
    except ValueError as exc:
        raise InvalidRecord(f"value is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRecord("value is nested too deeply to be a record") from exc
    if not isinstance(data, dict):
        raise InvalidRecord(f"value must be a JSON object, got {_json_type(data)}")
    return data


_MISSING = object()


def read_path(data: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, :data:`_MISSING` when a part is absent; a parent that is
    there but not an object raises :class:`InvalidRecord` naming it."""
    node: Any = data
    parts = path.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict):
            parent = ".".join(parts[:i])
            raise InvalidRecord(f"{path}: {parent} is {_json_type(node)}, not an object")
        node = node.get(part, _MISSING)
        if node is _MISSING:
            return _MISSING
    return node


def compile_shaped_parser(
    model: type[M], paths: dict[str, str], time_field: str, time_format: str, from_timestamp: bool
) -> Callable[..., Any]:
    """A parser for a side shaped otherwise (see above): (key, value, timestamp) -> the flat
    record (the ``model`` instance), or :class:`InvalidRecord` whose reason names the spec's
    path. ``paths``: flat field -> dotted path (the time field absent when ``from_timestamp``);
    ``timestamp``: the record's Kafka timestamp in epoch ms (None: it has none)."""
    items = tuple(paths.items())
    to_path = dict(items)
    if from_timestamp:
        to_path[time_field] = KAFKA_TIMESTAMP
    key_field = model.key_field
    name = model.__name__

    def parse_shaped(
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
    ) -> Any:
        data = _fast_object(value)
        if data is None:
            data = _json_object(value)  # accepts, or says why not
        flat: dict[str, Any] = {}
        for f, path in items:
            got = read_path(data, path) if "." in path else data.get(path, _MISSING)
            if got is not _MISSING:
                flat[f] = got
        if from_timestamp:
            if timestamp is None or timestamp < 0:
                raise InvalidRecord(f"{KAFKA_TIMESTAMP}: the record has no Kafka timestamp")
            flat[time_field] = timestamp
        elif time_format != "epoch_ms" and time_field in flat:
            try:
                flat[time_field] = convert_time(flat[time_field], time_format)
            except InvalidRecord as exc:
                raise InvalidRecord(
                    f"invalid {name}: {to_path[time_field]}: {exc} (time_format {time_format})"
                ) from None
        try:
            record = model.model_validate(flat)
        except ValidationError as exc:
            raise InvalidRecord(f"invalid {name}: {_describe(exc, to_path)}") from exc
        expected = getattr(record, key_field)
        if key is None:
            raise InvalidRecord(f"record has no key; it must be keyed by {to_path[key_field]}")
        key_text = key.decode("utf-8", errors="replace")
        if key_text != str(expected):
            raise InvalidRecord(
                f"key {key_text[:60]!r} disagrees with {to_path[key_field]} {str(expected)[:60]!r}"
            )
        return record

    return parse_shaped

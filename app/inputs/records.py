"""Wire records (docs/joins/topics.md) and their validation.

Inputs are consumed as raw bytes and validated here, not by Faust's codecs: a record that fails
must become a dead letter with a reason a person understands, never an exception in an agent.
Rules (docs/concepts/guarantees.md#input-rules):
- values are UTF-8 JSON objects; unknown extra fields are ignored; a field named twice is
  refused (JSON parsers disagree on which one wins, so stream and batch could disagree);
- types are strict (``"5"`` is not an int, ``true`` is not an int);
- event times are epoch ms in [0, 2100-01-01);
- the record key must equal the value's key field (co-partitioning depends on it).

Here: the wire models and :func:`parse`, the judge of every refusal. Each record is parsed at
C speed by :mod:`app.inputs.parsers` (which hands whatever it cannot vouch for to
:func:`parse`); event times written otherwise are read by :mod:`app.inputs.time_formats`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

#: 2100-01-01T00:00:00Z in epoch ms: anything later is an absurd event time (a seconds/µs mix-up)
MAX_EVENT_TIME = 4_102_444_800_000

EventTime = Field(ge=0, lt=MAX_EVENT_TIME)


class InvalidRecord(ValueError):
    """A record that cannot be processed; ``str(exc)`` is the dead-letter reason."""


class WireModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    #: name of the field the record key must equal (its text: ``b"42"`` equals ``42``)
    key_field: ClassVar[str] = ""
    #: a composite key's fields, in order: the record key must equal their values as a JSON
    #: array (:func:`join_key_text`); empty: the key is :attr:`key_field`
    key_fields: ClassVar[tuple[str, ...]] = ()
    #: how a message names a composite key (the spec's paths)
    key_name: ClassVar[str] = ""


def join_key_text(values: Any) -> str:
    """A composite key's join key: its parts' values as a compact JSON array, strings as JSON
    writes them and integers in decimal (``["acme","u1"]``, ``["acme",42]``), as orjson,
    Jackson and ``JSON.stringify`` write it. A record of such a side is keyed by exactly these
    bytes (UTF-8): equal parts, equal bytes, equal partition."""
    return orjson.dumps(list(values)).decode()


def record_key_text(record: Any, model: type[WireModel]) -> str:
    """The text a record's key must equal: its key field's (``str()`` of an int), or a
    composite key's :func:`join_key_text`."""
    if model.key_fields:
        return join_key_text(getattr(record, f) for f in model.key_fields)
    return str(getattr(record, model.key_field))


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


def validation_reason(exc: ValidationError, paths: dict[str, str] | None = None) -> str:
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


def json_type(data: Any) -> str:
    """The JSON name of a decoded value's type (a person reads 'null', not 'NoneType')."""
    if data is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}.get(
        type(data), type(data).__name__
    )


def json_object(value: bytes | None) -> dict[str, Any]:
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
        raise InvalidRecord(f"value must be a JSON object, got {json_type(data)}")
    return data


def parse(model: type[M], key: bytes | None, value: bytes | None, check_key: bool = True) -> M:
    """Decode and validate one record, or raise :class:`InvalidRecord` saying why;
    ``check_key`` False: whatever its key."""
    data = json_object(value)
    try:
        record = model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRecord(f"invalid {model.__name__}: {validation_reason(exc)}") from exc
    if check_key:
        check_record_key(key, record, model, model.key_name or model.key_field)
    return record


def check_record_key(key: bytes | None, record: Any, model: type[WireModel], name: str) -> None:
    """Raise :class:`InvalidRecord` when ``key`` is not the record's key text
    (:func:`record_key_text`); ``name``: how the message names the key field(s)."""
    if key is None:
        raise InvalidRecord(f"record has no key; it must be keyed by {name}")
    expected = record_key_text(record, model)
    key_text = key.decode("utf-8", errors="replace")
    if key_text != expected:
        raise InvalidRecord(f"key {key_text[:60]!r} disagrees with {name} {expected[:60]!r}")


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
        """:meth:`_op_matches_zones` for :func:`app.inputs.parsers.compile_parser`'s fast path
        (False: let the model say why)."""
        return (rec.op == "ADD") == (rec.to_zone_id == rec.zone_id)

    @model_validator(mode="after")
    def _op_matches_zones(self) -> CarMoveIn:
        if (self.op == "ADD") != (self.to_zone_id == self.zone_id):
            raise ValueError("an ADD is addressed to its arrival's zone, a DEL to another one")
        return self

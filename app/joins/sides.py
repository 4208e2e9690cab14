"""A join spec's sides resolved: the fields, paths, event time and wire model of one input
topic, where a new deployment starts reading it, and the topic it is re-keyed through. The rules
of every side: an event-time spec's ``events`` and ``dimension`` (:mod:`app.joins.resolve`), a
foreign-key spec's ``left`` and ``right`` (:mod:`app.joins.fk_spec`).

A side declares its records' ``fields`` (path -> type, :data:`FIELD_TYPES`: a wire model is made
for them) or names a ``model``, a :class:`~app.inputs.records.WireModel` as ``"module:Class"``
(``"app.inputs.records:MoodIn"``; a module that moved still resolves by its old name:
:data:`MOVED_MODULES`). Every mistake is a :class:`~app.joins.spec.SpecError` naming the spec and
the field.
"""

from __future__ import annotations

import importlib
import re
from typing import Annotated, Any, get_args

from pydantic import AfterValidator, Field, create_model

from app.inputs.paths import HEADER, PathError, flat_name, header_name
from app.inputs.records import MAX_EVENT_TIME, InvalidRecord, WireModel
from app.inputs.time_formats import KAFKA_TIMESTAMP, iso_to_ms
from app.joins.spec import Side, SideConfig, SpecError

__all__ = [
    "FIELD_TYPES",
    "KEY_TYPES",
    "MOVED_MODULES",
    "is_json",
    "key_as_written",
    "key_paths",
    "parse_start",
    "repartition_of",
    "repartition_topic",
    "resolve_side",
]


def _no_negative_zero(x: float) -> float:
    return x + 0.0  # -0.0 -> 0.0: equal values serialize the same way


def _not_null(x: Any) -> Any:
    if x is None:
        raise ValueError("null is not a value here (declare the field 'json?' to allow it)")
    return x


#: the types a spec's ``fields`` may declare; ``T?`` makes a field optional (null or absent)
FIELD_TYPES: dict[str, Any] = {
    "str": Annotated[str, Field(max_length=10_000)],
    "int": int,
    "float": Annotated[float, Field(allow_inf_nan=False), AfterValidator(_no_negative_zero)],
    "bool": bool,
    "time": Annotated[int, Field(ge=0, lt=MAX_EVENT_TIME)],  # epoch ms, like every event time
    # an object, an array or any JSON value, copied as it is (not null unless "json?")
    "json": Annotated[Any, AfterValidator(_not_null)],
}
_KEY_TYPE = Annotated[str, Field(min_length=1, max_length=200)]
#: the types a key field (or a part of a composite key) may be declared: the record key is
#: compared with its text (``42`` with ``b"42"``)
KEY_TYPES = ("str", "int")
#: the types a header field may be declared: a header is text (or a time written as text)
_HEADER_TYPES = ("str", "time")


def is_json(side: Side, flat: str) -> bool:
    """Is the flat field ``flat`` of ``side`` declared ``json`` (or ``json?``)?"""
    annotation = side.model.model_fields[flat].annotation
    return annotation is Any or any(
        a is Any or get_args(a)[:1] == (Any,) for a in get_args(annotation)
    )


def key_paths(cfg: SideConfig) -> tuple[str, ...]:
    """The paths of a side's key: one, or a composite key's parts in order."""
    return (cfg.key,) if isinstance(cfg.key, str) else tuple(cfg.key)


def key_as_written(cfg: SideConfig) -> str:
    """A side's key as the spec writes it, for messages: ``user.id``, ``["tenant", "user.id"]``."""
    if isinstance(cfg.key, str):
        return cfg.key
    return "[" + ", ".join(f'"{k}"' for k in cfg.key) + "]"


def _flat_names(spec: str, side: str, cfg: SideConfig) -> dict[str, str]:
    """Path -> flat field name of a ``fields`` side (:func:`app.inputs.paths.flat_name`:
    ``user.tier`` -> ``user_tier``, ``@timestamp`` -> ``timestamp``, ``$header.ce_time`` ->
    ``ce_time``), or the name a ``copy`` entry ``{"user.tier": "tier"}`` gives it;
    ``$timestamp`` -> ``timestamp`` when it is the time."""
    assert cfg.fields is not None
    renames: dict[str, str] = {}
    for entry in cfg.copy_fields:
        if isinstance(entry, dict):
            if len(entry) != 1:
                raise SpecError(
                    f'{spec}: {side}.copy: {entry!r}: a rename is one {{"path": "name"}} pair'
                )
            renames.update(entry)
    paths = list(cfg.fields)
    if cfg.time == KAFKA_TIMESTAMP:
        paths.append(KAFKA_TIMESTAMP)
    out: dict[str, str] = {}
    for path in paths:
        if path == KAFKA_TIMESTAMP:
            default = "timestamp"
        else:
            try:
                default = flat_name(path)
            except PathError as exc:
                if path not in renames:
                    raise SpecError(
                        f"{spec}: {side}.fields: {exc} (write a name with a dot in "
                        'it in brackets, "[user.id]"; rename it in copy, {"path": "name"})'
                    ) from None
                default = ""
        flat = renames.get(path, default)
        if not flat.isidentifier() or flat.startswith("_"):
            raise SpecError(
                f"{spec}: {side}.copy renames {path!r} to {flat!r}, which is not a "
                "usable field name (letters, digits and '_', not first)"
            )
        out[path] = flat
    by_flat: dict[str, str] = {}
    for path, flat in out.items():
        if flat in by_flat:
            raise SpecError(
                f"{spec}: {side}: {by_flat[flat]!r} and {path!r} would both be the "
                f'field {flat!r}; rename one in copy ({{{path!r}: "name"}})'
            )
        by_flat[flat] = path
    return out


def _model_from_fields(
    spec: str, side: str, cfg: SideConfig, flat: dict[str, str]
) -> type[WireModel]:
    assert cfg.fields is not None
    fields: dict[str, Any] = {}
    declared = dict(cfg.fields)
    if cfg.time == KAFKA_TIMESTAMP:
        declared[KAFKA_TIMESTAMP] = "time"
    for path, typ in declared.items():
        optional = typ.endswith("?")
        base = typ[:-1] if optional else typ
        if base not in FIELD_TYPES:
            raise SpecError(
                f"{spec}: {side}.fields.{path}: unknown type {typ!r} (one of "
                f"{', '.join(FIELD_TYPES)}, optionally with '?')"
            )
        if header_name(path) is not None and base not in _HEADER_TYPES:
            raise SpecError(
                f"{spec}: {side}.fields.{path}: a header is text: declare it "
                f"{' or '.join(repr(t) for t in _HEADER_TYPES)} (a time, read as "
                f"time_format says), got {typ!r}"
            )
        keys = key_paths(cfg)
        t = _KEY_TYPE if path in keys and base == "str" else FIELD_TYPES[base]
        fields[flat[path]] = (t | None, None) if optional else (t, ...)
    for path in key_paths(cfg):
        if path in cfg.fields and cfg.fields[path] not in KEY_TYPES:
            raise SpecError(
                f"{spec}: {side}.key {path!r} must be declared 'str' or 'int' (the record "
                f"key is compared with its text), got {cfg.fields.get(path)!r}"
            )
    if cfg.time in cfg.fields and cfg.fields[cfg.time] != "time":
        raise SpecError(
            f"{spec}: {side}.time {cfg.time!r} must be declared 'time' (an event "
            f"time, written as time_format says), got {cfg.fields.get(cfg.time)!r}"
        )
    title = "".join(p.title() for p in cfg.topic.replace("_", "-").split("-"))
    model = create_model(f"{title}In", __base__=WireModel, **fields)
    keys = tuple(flat.get(k, k) for k in key_paths(cfg))
    if isinstance(cfg.key, str):
        model.key_field = keys[0]
    else:
        model.key_fields = keys
        model.key_name = key_as_written(cfg)
    return model


#: where etj's own wire models were before they moved (issue T): a joins file that names a model
#: by its old module (``app.records:MoodIn``) still gets it
MOVED_MODULES = {"app.records": "app.inputs.records"}


def _import_model(spec: str, side: str, cfg: SideConfig) -> type[WireModel]:
    assert cfg.model is not None
    module, _, attr = cfg.model.partition(":")
    try:
        model = getattr(importlib.import_module(MOVED_MODULES.get(module, module)), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SpecError(f"{spec}: {side}.model {cfg.model!r} cannot be imported: {exc}") from exc
    if not (isinstance(model, type) and issubclass(model, WireModel)):
        raise SpecError(f"{spec}: {side}.model {cfg.model!r} is not a WireModel")
    if model.key_field != cfg.key:
        raise SpecError(
            f"{spec}: {side}.key {cfg.key!r} disagrees with {cfg.model}, whose "
            f"records are keyed by {model.key_field!r}"
        )
    info = model.model_fields.get(model.key_field)
    if info is None or info.annotation not in (str, int):
        kind = getattr(getattr(info, "annotation", None), "__name__", info and info.annotation)
        raise SpecError(
            f"{spec}: {side}.model {cfg.model!r}: its key field {model.key_field!r} is "
            f"{kind}; a key is a required str or int (the record key is compared with "
            "its text, and the join's state is keyed by that text)"
        )
    return model


def parse_start(spec: str, where: str, raw: str | None) -> str | int | None:
    """A ``start`` setting: earliest, latest, or epoch ms of an ISO-8601 time with a zone."""
    if raw is None or raw in ("earliest", "latest"):
        return raw
    try:
        return iso_to_ms(raw)
    except InvalidRecord as exc:
        raise SpecError(
            f"{spec}: {where}: {exc} (give earliest, latest or an ISO-8601 time "
            "such as 2026-01-01T00:00:00Z)"
        ) from None


#: Kafka's rule for a topic name (``kafka.common.internals.Topic``)
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def repartition_topic(app_id: str, join: str, side: str) -> str:
    """The internal topic a side's records are re-keyed through: ``<app id>-<join>-<side>-
    repartition`` (Kafka Streams names its own ``<application id>-<name>-repartition``)."""
    return f"{app_id}-{join}-{side}-repartition"


def resolve_side(
    spec: str, side: str, cfg: SideConfig, start: str | int, repartition: str | None = None
) -> Side:
    """One input resolved: its fields, paths, time and wire model (the rules of every side,
    event-time and foreign-key); ``start``: where a new deployment starts reading it
    (:func:`parse_start`); ``repartition``: the topic it is re-keyed through
    (:func:`repartition_of`; None: none)."""
    if (cfg.fields is None) == (cfg.model is None):
        raise SpecError(f"{spec}: {side}: give either 'fields' (name -> type) or 'model'")
    if not isinstance(cfg.key, str) and len(cfg.key) < 2:
        raise SpecError(
            f"{spec}: {side}.key: a composite key lists two fields or more; one is "
            f'written as a string ("key": "user.id"), got {cfg.key!r}'
        )
    if cfg.time == KAFKA_TIMESTAMP and cfg.time_format != "epoch_ms":
        raise SpecError(
            f"{spec}: {side}.time_format {cfg.time_format!r}: the Kafka timestamp "
            f"({KAFKA_TIMESTAMP}) is epoch ms; time_format is for a time field"
        )
    if cfg.fields is not None:
        flat = _flat_names(spec, side, cfg)
        model = _model_from_fields(spec, side, cfg, flat)
    else:
        written = (
            *key_paths(cfg),
            cfg.time,
            cfg.id or "",
            *(c for c in cfg.copy_fields if isinstance(c, str)),
        )
        shaped = [
            w
            for w, bad in (
                ("a composite key", not isinstance(cfg.key, str)),
                ("a dotted path", any("." in f and not f.startswith(HEADER) for f in written)),
                ("a header field", any(f.startswith(HEADER) for f in written)),
                ("a rename in copy", any(isinstance(c, dict) for c in cfg.copy_fields)),
                (f"time_format {cfg.time_format}", cfg.time_format != "epoch_ms"),
                ("time $timestamp", cfg.time == KAFKA_TIMESTAMP),
            )
            if bad
        ]
        if shaped:
            raise SpecError(
                f"{spec}: {side}: {shaped[0]} needs 'fields', not 'model' (a "
                "wire model reads flat records with an epoch-ms time)"
            )
        model = _import_model(spec, side, cfg)
        flat = {f: f for f in model.model_fields}
    known = list(flat)
    copy_paths = [next(iter(c)) if isinstance(c, dict) else c for c in cfg.copy_fields]
    keys = key_paths(cfg)
    named = [
        *(("key", k) for k in keys),
        ("time", cfg.time),
        *(("copy", f) for f in copy_paths),
    ]
    if cfg.id is not None:
        named.append(("id", cfg.id))
    for what, f in named:
        if f == KAFKA_TIMESTAMP and what in ("key", "id"):
            raise SpecError(
                f"{spec}: {side}.{what}: {KAFKA_TIMESTAMP} is the record's Kafka "
                "timestamp, only a 'time' (or copied)"
            )
        if f not in known:
            shown = [k for k in known if k != KAFKA_TIMESTAMP]
            raise SpecError(
                f"{spec}: {side}.{what} names {f!r}, a field {cfg.topic} records do "
                f"not have (they have: {', '.join(shown)})"
            )
    if len(set(copy_paths)) != len(copy_paths):
        raise SpecError(f"{spec}: {side}.copy lists a field twice: {copy_paths}")
    if len(set(keys)) != len(keys):
        raise SpecError(f"{spec}: {side}.key lists a field twice: {key_as_written(cfg)}")
    for k in keys:
        if not model.model_fields[flat[k]].is_required():
            raise SpecError(
                f"{spec}: {side}.key {k!r} is optional: a key is required (declare it "
                "'str' or 'int', without '?')"
            )
    if cfg.max_future_ms is not None and cfg.max_future_ms < 0:
        raise SpecError(f"{spec}: {side}.max_future_ms must be at least 0")
    paths = (
        tuple((f, p) for p, f in flat.items() if p != KAFKA_TIMESTAMP)
        if cfg.fields is not None
        else ()
    )
    key_fields = tuple(flat[k] for k in keys)
    return Side(
        cfg.topic,
        key_fields[0] if len(keys) == 1 and isinstance(cfg.key, str) else key_as_written(cfg),
        flat[cfg.time],
        tuple(flat[p] for p in copy_paths),
        model,
        paths,
        cfg.time_format,
        cfg.time == KAFKA_TIMESTAMP,
        start,
        repartition,
        key_fields=key_fields if not isinstance(cfg.key, str) else (),
        time_given=cfg.fields is not None and "time_format" in cfg.model_fields_set,
        max_future_ms=cfg.max_future_ms,
        format=cfg.format,
        key_format=cfg.key_format,
    )


def repartition_of(spec: str, side: str, cfg: SideConfig, app_id: str, join: str) -> str | None:
    """The repartition topic of a side with ``"repartition": true`` (None without), refused
    when Kafka would refuse its name."""
    if not cfg.repartition:
        return None
    topic = repartition_topic(app_id, join, side)
    if not _TOPIC_NAME.match(topic):
        raise SpecError(
            f"{spec}: {side}.repartition: its topic {topic!r} (<app id>-<join>-"
            f"<side>-repartition) is not a valid Kafka topic name (letters, digits, "
            "'.', '_', '-', at most 249): change ETJ_APP_ID"
        )
    return topic

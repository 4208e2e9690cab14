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
from typing import Annotated, Any

from pydantic import AfterValidator, Field, create_model

from app.inputs.records import MAX_EVENT_TIME, InvalidRecord, WireModel
from app.inputs.time_formats import KAFKA_TIMESTAMP, iso_to_ms
from app.joins.spec import Side, SideConfig, SpecError

__all__ = [
    "FIELD_TYPES",
    "MOVED_MODULES",
    "parse_start",
    "repartition_of",
    "repartition_topic",
    "resolve_side",
]


def _no_negative_zero(x: float) -> float:
    return x + 0.0  # -0.0 -> 0.0: equal values serialize the same way


#: the types a spec's ``fields`` may declare; ``T?`` makes a field optional (null or absent)
FIELD_TYPES: dict[str, Any] = {
    "str": Annotated[str, Field(max_length=10_000)],
    "int": int,
    "float": Annotated[float, Field(allow_inf_nan=False), AfterValidator(_no_negative_zero)],
    "bool": bool,
    "time": Annotated[int, Field(ge=0, lt=MAX_EVENT_TIME)],  # epoch ms, like every event time
}
_KEY_TYPE = Annotated[str, Field(min_length=1, max_length=200)]


def _flat_names(spec: str, side: str, cfg: SideConfig) -> dict[str, str]:
    """Path -> flat field name of a ``fields`` side: the path with dots turned into
    underscores (``user.tier`` -> ``user_tier``), or the name a ``copy`` entry
    ``{"user.tier": "tier"}`` gives it; ``$timestamp`` -> ``timestamp`` when it is the time."""
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
        if path != KAFKA_TIMESTAMP and not all(
            p.isidentifier() and not p.startswith("_") for p in path.split(".")
        ):
            raise SpecError(
                f"{spec}: {side}.fields: {path!r} is not a usable field name "
                "(names, or names joined by dots for nested fields)"
            )
        flat = renames.get(path, "timestamp" if path == KAFKA_TIMESTAMP else path.replace(".", "_"))
        if not flat.isidentifier() or flat.startswith("_"):
            raise SpecError(
                f"{spec}: {side}.copy renames {path!r} to {flat!r}, which is not a "
                "usable field name"
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
        t = _KEY_TYPE if path == cfg.key and base == "str" else FIELD_TYPES[base]
        fields[flat[path]] = (t | None, None) if optional else (t, ...)
    if cfg.key in cfg.fields and cfg.fields[cfg.key] != "str":
        raise SpecError(
            f"{spec}: {side}.key {cfg.key!r} must be declared 'str' (record keys are "
            f"UTF-8 strings and must equal it), got {cfg.fields.get(cfg.key)!r}"
        )
    if cfg.time in cfg.fields and cfg.fields[cfg.time] != "time":
        raise SpecError(
            f"{spec}: {side}.time {cfg.time!r} must be declared 'time' (an event "
            f"time, written as time_format says), got {cfg.fields.get(cfg.time)!r}"
        )
    title = "".join(p.title() for p in cfg.topic.replace("_", "-").split("-"))
    model = create_model(f"{title}In", __base__=WireModel, **fields)
    model.key_field = flat.get(cfg.key, cfg.key)
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
    if cfg.time == KAFKA_TIMESTAMP and cfg.time_format != "epoch_ms":
        raise SpecError(
            f"{spec}: {side}.time_format {cfg.time_format!r}: the Kafka timestamp "
            f"({KAFKA_TIMESTAMP}) is epoch ms; time_format is for a time field"
        )
    if cfg.fields is not None:
        flat = _flat_names(spec, side, cfg)
        model = _model_from_fields(spec, side, cfg, flat)
    else:
        shaped = [
            w
            for w, bad in (
                (
                    "a dotted path",
                    any(
                        "." in f
                        for f in (
                            cfg.key,
                            cfg.time,
                            cfg.id or "",
                            *(c for c in cfg.copy_fields if isinstance(c, str)),
                        )
                    ),
                ),
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
    named = [("key", cfg.key), ("time", cfg.time), *(("copy", f) for f in copy_paths)]
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
    paths = (
        tuple((f, p) for p, f in flat.items() if p != KAFKA_TIMESTAMP)
        if cfg.fields is not None
        else ()
    )
    return Side(
        cfg.topic,
        flat[cfg.key],
        flat[cfg.time],
        tuple(flat[p] for p in copy_paths),
        model,
        paths,
        cfg.time_format,
        cfg.time == KAFKA_TIMESTAMP,
        start,
        repartition,
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

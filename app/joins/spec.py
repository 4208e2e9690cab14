"""Join specs: a new pair of topics to join is configuration, validated before anything runs.

A spec names the event topic and the dimension topic, the key field and event-time field of
each, the fields to copy into the output, the output topic, the retention, the mode
(``left``/``inner``), an optional emit window and the as-of rule (see
:mod:`app.logic.event_join`); a side keyed otherwise says ``"repartition": true`` and is read
through ``<app id>-<join>-<side>-repartition`` (:attr:`Side.repartition`, :attr:`Side.input`). It is written as plain data (a dict, or JSON in ``ETJ_JOINS_FILE``)
and resolved into a :class:`JoinSpec` that knows how to read its records and write its output.

Every mistake a person can make in one is refused with a :class:`SpecError` that names the spec
and the field (a typo in a field name, a field the topic's records do not have, two joins
sharing a ticks topic ...), at import time, so ``faust -A app.main worker`` stops before it
consumes anything. Co-partitioning, which needs the broker, is checked at start
(:mod:`app.faust_app`, the groups of :mod:`app.topology`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    create_model,
)

from app.inputs.records import (
    KAFKA_TIMESTAMP,
    MAX_EVENT_TIME,
    InvalidRecord,
    WireModel,
    iso_to_ms,
)
from app.logic.event_join import AsOf, Event, JoinRules, Mode, Revision, Version, derive_id

__all__ = [
    "FIELD_TYPES",
    "JoinSpec",
    "Side",
    "SpecError",
    "TableNames",
    "copartition_groups",
    "refuse_shared_inputs",
    "repartition_topic",
    "resolve",
    "resolve_all",
]


class SpecError(ValueError):
    """A join spec that cannot work; the message says which spec, which field and why."""


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


class SideConfig(BaseModel):
    """One input topic of a join, as written in configuration."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    topic: str = Field(min_length=1)
    key: str = Field(
        min_length=1,
        description="field (a dotted path: 'user.id') the record key equals (co-partitioning)",
    )
    time: str = Field(
        min_length=1,
        description="event-time field (a path), or '$timestamp': the Kafka record timestamp",
    )
    time_format: Literal["epoch_ms", "epoch_s", "epoch_us", "iso8601"] = Field(
        "epoch_ms", description="how the time field writes the event time"
    )
    start: str | None = Field(
        None,
        description="where a new deployment starts reading this "
        "topic: earliest, latest or an ISO-8601 time (default: the "
        "join's start)",
    )
    fields: dict[str, str] | None = Field(None, description="field path -> type (FIELD_TYPES)")
    model: str | None = Field(None, description="'module:Class' of a WireModel, instead of fields")
    copy_fields: list[str | dict[str, str]] = Field(
        alias="copy",
        description='fields (paths) copied to the output; {"path": "name"} renames one',
    )
    id: str | None = Field(None, description="events only: field holding the join id")
    time_as: str | None = Field(
        None, description="dimension only: output field of the joined version's event time"
    )
    repartition: StrictBool = Field(
        False,
        description="re-key the records by the key field through "
        "an internal topic <app id>-<join>-<side>-repartition (records "
        "keyed otherwise, or not at all); off: the record key must equal "
        "the key field",
    )


class TableNames(BaseModel):
    """The names of a join's four tables (and so of their changelog topics)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dimension: str = Field(min_length=1, description="key -> the dimension's versions")
    joins: str = Field(min_length=1, description="the joins in retention")
    clock: str = Field(min_length=1, description="partition -> stream time")
    index: str | None = Field(
        None,
        description="unused: a join's indexes live in its joins "
        "table (kept so that specs written before still load)",
    )


class JoinConfig(BaseModel):
    """A join spec as written in configuration (docs/joins/declarative.md#what-a-spec-says)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,39}$")
    events: SideConfig
    dimension: SideConfig
    output: str = Field(min_length=1)
    ticks: str = Field(min_length=1, description="internal topic of revisit ticks")
    mode: Mode = "left"
    asof: AsOf = "before"
    retention_ms: int = Field(gt=0)
    window_ms: int | None = Field(None, gt=0)
    late_dimensions: bool = True
    start: str | None = Field(
        None,
        description="where a new deployment starts reading both "
        "inputs: earliest (default), latest or an ISO-8601 time",
    )
    layout: Literal["per-key", "per-join"] = Field(
        "per-join",
        description="unused: every join keeps one row per join (app.joins.state); "
        "both values are accepted so that specs written before still load",
    )
    review_lag_ms: int | None = Field(None, ge=0)
    partitions: int | None = Field(
        None,
        ge=1,
        description="partition count of the join's "
        "topics: its inputs must have it, its ticks topic and its "
        "tables' changelogs are created with it; default "
        "ETJ_PARTITIONS",
    )
    tables: TableNames | None = Field(
        None,
        description="table names; default <name>-dimension, "
        "<name>-joins, <name>-clock, <name>-active|-expiry",
    )
    hold_ms: int | None = Field(
        None,
        gt=0,
        description="left mode only: an event with no "
        "applicable version waits up to this much of its partition's "
        "stream time for one, then answers as left does",
    )
    finality: bool = Field(
        False,
        description="publish finality promises on "
        "<output>-final: per partition, every join before a time is final",
    )
    emit: Literal["all", "final"] = Field(
        "all",
        description="all: every revision, as soon as it is known; final: one revision "
        "per join, when it becomes final (implies finality)",
    )


@dataclass(frozen=True)
class Side:
    """A resolved input: its topic, fields and the wire model that validates its records."""

    topic: str
    key: str
    time: str
    copy: tuple[str, ...]
    model: type[WireModel]
    #: flat field -> the path it is read from (``user_tier`` -> ``user.tier``), every field;
    #: empty for a model side (its fields are top-level)
    paths: tuple[tuple[str, str], ...] = ()
    time_format: str = "epoch_ms"
    #: the event time is the Kafka record timestamp (``"time": "$timestamp"``)
    from_timestamp: bool = False
    #: where a new deployment starts: "earliest", "latest" or epoch ms (the first offset at or
    #: after it); only without a committed offset
    start: str | int = "earliest"
    #: the internal topic its records are re-keyed through (``"repartition": true``), which
    #: the join reads instead of :attr:`topic`; None: the join reads :attr:`topic` itself
    repartition: str | None = None

    @property
    def input(self) -> str:
        """The topic the join's agent reads for this side: the repartition topic, or the
        user's topic itself."""
        return self.repartition or self.topic

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(self.model.model_fields)

    @property
    def shaped(self) -> bool:
        """Are its records read otherwise than flat with an epoch-ms time (then
        :func:`app.inputs.records.compile_shaped_parser` reads them)?"""
        return (
            self.from_timestamp
            or self.time_format != "epoch_ms"
            or any(flat != path for flat, path in self.paths)
        )

    def path_of(self, flat: str) -> str:
        """The spec's name of a flat field (its path, or ``$timestamp``)."""
        if self.from_timestamp and flat == self.time:
            return KAFKA_TIMESTAMP
        return dict(self.paths).get(flat, flat)

    def parser(self) -> Any:
        """(key, value, timestamp=None) -> the flat record, or InvalidRecord."""
        from app.inputs.records import compile_parser, compile_shaped_parser

        if not self.shaped:
            return compile_parser(self.model)  # the fast path itself, no wrapper
        return compile_shaped_parser(
            self.model, dict(self.paths), self.time, self.time_format, self.from_timestamp
        )


@dataclass(frozen=True)
class JoinSpec:
    """A validated join: everything the engine needs, and the translation to/from the wire."""

    name: str
    events: Side
    dimension: Side
    id_field: str | None
    time_as: str
    output: str
    ticks: str
    mode: Mode
    asof: AsOf
    retention_ms: int
    window_ms: int | None
    late_dimensions: bool
    layout: Literal["per-key", "per-join"]
    review_lag_ms: int | None
    tables: TableNames
    #: the partition count of its co-partitioned topics (None: ETJ_PARTITIONS)
    partitions: int | None = None
    #: a bounded hold (left mode): stream-time ms an unanswered event waits for a version
    hold_ms: int | None = None
    #: publish finality promises (app.logic.finality) on :attr:`final_topic`
    finality: bool = False
    #: "all" revisions, or only each join's "final" one
    emit: Literal["all", "final"] = "all"

    @property
    def final_topic(self) -> str | None:
        """``<output>-final``: the finality promises (None: the spec publishes none)."""
        return f"{self.output}-final" if self.finality or self.emit == "final" else None

    @cached_property
    def rules(self) -> JoinRules:
        return JoinRules(self.asof, self.mode, self.hold_ms)

    @cached_property
    def payload_fields(self) -> tuple[str, ...]:
        """Event fields kept in state besides the key, the join id and the event time."""
        return tuple(f for f in self.events.copy if f not in (self.events.key, self.events.time))

    @cached_property
    def output_fields(self) -> tuple[str, ...]:
        dim = self.dimension.copy
        return (
            "id",
            *self.events.copy,
            *dim,
            self.time_as,
            "revision",
            *(f"previous_{f}" for f in dim),
            "cause",
        )

    @property
    def inputs(self) -> tuple[str, str, str]:
        """The co-partitioned topics the join reads: events, dimension (each its repartition
        topic when it has one) and the internal ticks."""
        return (self.events.input, self.dimension.input, self.ticks)

    @property
    def repartitioned(self) -> tuple[Side, ...]:
        """The sides re-keyed through a repartition topic (``"repartition": true``)."""
        return tuple(s for s in (self.events, self.dimension) if s.repartition)

    def event_of(self, record: WireModel) -> Event:
        """The logic's view of a validated event record."""
        given = self._id_of(record) if self.id_field else None
        jid = given or derive_id(getattr(record, f) for f in self.events.copy)
        return Event(self._key_of(record), jid, self._time_of(record), self._payload_of(record))

    @cached_property
    def _id_of(self) -> Callable[[Any], Any]:
        return attrgetter(self.id_field) if self.id_field else (lambda r: None)

    @cached_property
    def _key_of(self) -> Callable[[Any], Any]:
        return attrgetter(self.events.key)

    @cached_property
    def _time_of(self) -> Callable[[Any], Any]:
        return attrgetter(self.events.time)

    @cached_property
    def _payload_of(self) -> Callable[[Any], tuple[Any, ...]]:
        fields = self.payload_fields
        if not fields:
            return lambda r: ()
        if len(fields) == 1:
            get = attrgetter(fields[0])
            return lambda r: (get(r),)
        return attrgetter(*fields)  # type: ignore[return-value]

    def version_of(self, record: WireModel) -> Version:
        """``[event_time, *copied values]`` of a validated dimension record."""
        return [
            getattr(record, self.dimension.time),
            *(getattr(record, f) for f in self.dimension.copy),
        ]

    def key_of(self, record: WireModel, side: Side) -> str:
        return getattr(record, side.key)  # type: ignore[no-any-return]

    def to_wire(self, rev: Revision) -> dict[str, Any]:
        """One revision as the output topic carries it (field order of :attr:`output_fields`)."""
        return self._to_wire(rev)

    @cached_property
    def _to_wire(self) -> Callable[[Revision], dict[str, Any]]:
        """:meth:`to_wire` made for this spec: one dict display with the spec's field names
        (built once, as source, from the validated field names; a generic loop over the
        fields cost a tenth of a worker's main thread)."""
        payload = self.payload_fields
        items = [("id", "r.id")]
        for f in self.events.copy:
            src = (
                "r.key"
                if f == self.events.key
                else "r.event_time"
                if f == self.events.time
                else f"p[{payload.index(f)}]"
            )
            items.append((f, src))
        dim = self.dimension.copy
        items += [(f, f"a[{i}]") for i, f in enumerate(dim)]
        items += [(self.time_as, "r.answer_time"), ("revision", "r.revision")]
        items += [(f"previous_{f}", f"v[{i}]") for i, f in enumerate(dim)]
        items.append(("cause", "r.cause"))
        body = ", ".join(f"{name!r}: {src}" for name, src in items)
        source = (
            f"def to_wire(r):\n    p = r.payload\n    a = r.answer or NONE\n"
            f"    v = r.previous or NONE\n    return {{{body}}}\n"
        )
        scope: dict[str, Any] = {"NONE": (None,) * len(dim)}
        exec(compile(source, f"<to_wire of join {self.name}>", "exec"), scope)
        return scope["to_wire"]  # type: ignore[no-any-return]

    def describe(self) -> dict[str, Any]:
        """What ``GET /joins/`` lists for this spec."""

        def side(s: Side) -> dict[str, Any]:
            return {
                "topic": s.topic,
                "key": s.key,
                "time": s.time,
                "copy": list(s.copy),
                "fields": list(s.field_names),
                "time_format": s.time_format,
                "start": s.start,
                **({"paths": dict(s.paths)} if s.shaped else {}),
                **({"repartition": s.repartition} if s.repartition else {}),
            }

        return {
            "name": self.name,
            "events": {**side(self.events), "id": self.id_field},
            "dimension": {**side(self.dimension), "time_as": self.time_as},
            "output": self.output,
            "output_fields": list(self.output_fields),
            "ticks": self.ticks,
            "mode": self.mode,
            "asof": self.asof,
            "retention_ms": self.retention_ms,
            "window_ms": self.window_ms,
            "late_dimensions": self.late_dimensions,
            "layout": self.layout,
            "review_lag_ms": self.review_lag_ms,
            "partitions": self.partitions,
            "tables": self.tables.model_dump(),
            "hold_ms": self.hold_ms,
            "finality": self.final_topic is not None,
            "final_topic": self.final_topic,
            "emit": self.emit,
        }


# --- resolution ----------------------------------------------------------------------------------


def _where(spec: Any, index: int | None) -> str:
    name = spec.get("name") if isinstance(spec, dict) else None
    at = f" #{index + 1}" if index is not None else ""
    return f"join spec{at}" + (f" {name!r}" if name else "")


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "spec"
        if err["type"] == "missing":
            parts.append(f"{loc}: missing")
        elif err["type"] == "extra_forbidden":
            parts.append(f"{loc}: unknown setting")
        else:
            parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


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


def _start(spec: str, where: str, raw: str | None) -> str | int | None:
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


def _side(
    spec: str, side: str, cfg: SideConfig, start: str | int, repartition: str | None = None
) -> Side:
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
    )


def _repartition(spec: str, side: str, cfg: SideConfig, app_id: str, join: str) -> str | None:
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


def resolve(
    raw: dict[str, Any] | JoinConfig, index: int | None = None, app_id: str = "etj"
) -> JoinSpec:
    """Validate one spec (plain data or a :class:`JoinConfig`) and resolve it. ``app_id``
    (``ETJ_APP_ID``) names a repartitioned side's internal topic."""
    cfg, where = validated(JoinConfig, raw, index)
    if cfg.events.time_as is not None or cfg.dimension.id is not None:
        raise SpecError(
            f"{where}: 'time_as' belongs to the dimension side, 'id' to the events side"
        )
    if not cfg.dimension.time_as:
        raise SpecError(
            f"{where}: dimension.time_as: missing (the output field carrying the "
            "joined version's event time, e.g. 'movie_event_time')"
        )
    if not cfg.dimension.copy_fields:
        raise SpecError(f"{where}: dimension.copy is empty: a join must copy at least one field")
    start = _start(where, "start", cfg.start) or "earliest"
    events = _side(
        where,
        "events",
        cfg.events,
        _start(where, "events.start", cfg.events.start) or start,
        _repartition(where, "events", cfg.events, app_id, cfg.name),
    )
    dimension = _side(
        where,
        "dimension",
        cfg.dimension,
        _start(where, "dimension.start", cfg.dimension.start) or start,
        _repartition(where, "dimension", cfg.dimension, app_id, cfg.name),
    )
    for f in dimension.copy:
        if not dimension.model.model_fields[f].is_required():
            raise SpecError(
                f"{where}: dimension.copy field {f!r} is optional, but null means "
                "'no version' in the output; declare it required"
            )
    topics = [cfg.events.topic, cfg.dimension.topic, cfg.ticks]
    if len(set(topics)) != 3 or cfg.output in topics:
        raise SpecError(
            f"{where}: events {cfg.events.topic}, dimension {cfg.dimension.topic}, "
            f"ticks {cfg.ticks} and output {cfg.output} must be four different topics"
        )
    for side in (events, dimension):
        if side.repartition in (*topics, cfg.output):
            raise SpecError(
                f"{where}: {side.repartition}, the repartition topic of "
                f"{side.topic}, is one of the spec's own topics"
            )
    id_field = (
        None
        if cfg.events.id is None
        else {p: f for f, p in events.paths}.get(cfg.events.id, cfg.events.id)
    )
    spec = JoinSpec(
        cfg.name,
        events,
        dimension,
        id_field,
        cfg.dimension.time_as,
        cfg.output,
        cfg.ticks,
        cfg.mode,
        cfg.asof,
        cfg.retention_ms,
        cfg.window_ms,
        cfg.late_dimensions,
        cfg.layout,
        cfg.review_lag_ms,
        cfg.tables
        or TableNames(
            dimension=f"{cfg.name}-dimension",
            joins=f"{cfg.name}-joins",
            clock=f"{cfg.name}-clock",
            index=None,
        ),
        cfg.partitions,
        hold_ms=cfg.hold_ms,
        finality=cfg.finality or cfg.emit == "final",
        emit=cfg.emit,
    )
    _check_hold(where, cfg)
    out = spec.output_fields
    dupes = sorted({f for f in out if out.count(f) > 1})
    if dupes:
        raise SpecError(
            f"{where}: output fields collide: {', '.join(dupes)} (the output carries "
            f"id, events.copy, dimension.copy, time_as, revision, previous_<copy>, "
            "cause)"
        )
    if cfg.window_ms is not None and cfg.window_ms > cfg.retention_ms:
        raise SpecError(
            f"{where}: window_ms {cfg.window_ms} exceeds retention_ms "
            f"{cfg.retention_ms}: events between the two would be admitted with "
            "their state already purged"
        )
    return spec


def _check_hold(where: str, cfg: JoinConfig) -> None:
    """A bounded hold is the middle of left and inner: it must end before the state it waits
    in is purged (or the event falls out of the emit window), so a held event is always
    answered."""
    hold = cfg.hold_ms
    if hold is None:
        return
    if cfg.mode != "left":
        raise SpecError(
            f"{where}: hold_ms is for mode 'left' (an inner join already holds an "
            f"event until a version comes), got mode {cfg.mode!r}"
        )
    if hold >= cfg.retention_ms:
        raise SpecError(
            f"{where}: hold_ms {hold} must be less than retention_ms "
            f"{cfg.retention_ms}: a held event must be answered before it is purged"
        )
    if cfg.window_ms is not None and hold > cfg.window_ms:
        raise SpecError(
            f"{where}: hold_ms {hold} exceeds window_ms {cfg.window_ms}: a held "
            "event must be answered while it is in the emit window"
        )
    if cfg.finality or cfg.emit == "final":
        # a hold's answer lost in a crash is re-sent by a later tick, and a promise made in
        # between covers it: the re-send is then dropped and the join never answered (a
        # fresh clone's finality test, findings.md). Refused until promises wait for them.
        raise SpecError(
            f"{where}: hold_ms with finality (or emit 'final') is not supported "
            "yet: a hold's answer lost in a crash could be left unsent under a "
            "promise; use one or the other"
        )


def refuse_shared_inputs(sides: Iterable[tuple[str, str, Side]]) -> dict[str, tuple[str, Any]]:
    """Refuse a topic read by two sides, of one join or two; ``sides``: (join name, side name,
    side). Topic -> (its join, its start).

    Why: a worker's consumer hands each topic's records to the one agent that reads it
    (:mod:`app.compat.consumer`: an inbox per topic); a second reader would get nothing, with
    no error (two helpers found it, 2026-11-28). Give each join a topic of its own."""
    seen: dict[str, tuple[str, str, Any]] = {}
    for name, side_name, side in sides:
        other = seen.setdefault(side.topic, (name, side_name, side.start))
        if other[:2] != (name, side_name):
            raise SpecError(
                f"join specs {other[0]!r} ({other[1]}) and {name!r} ({side_name}) "
                f"both read {side.topic}: a worker hands a topic's records to one "
                "agent; give each join a topic of its own"
            )
    return {t: (n, start) for t, (n, _, start) in seen.items()}


def resolve_all(raws: Sequence[dict[str, Any] | JoinConfig], app_id: str = "etj") -> list[JoinSpec]:
    """Resolve every spec, then refuse what only shows across specs (shared names, loops)."""
    specs = [resolve(raw, i, app_id) for i, raw in enumerate(raws)]
    for what, of in (
        ("name", lambda s: [s.name]),
        ("ticks topic", lambda s: [s.ticks]),
        ("output topic", lambda s: [s.output, *filter(None, [s.final_topic])]),
        ("table name", lambda s: [n for n in s.tables.model_dump().values() if n is not None]),
    ):
        seen: dict[str, str] = {}
        for s in specs:
            for value in of(s):
                if value in seen:
                    raise SpecError(
                        f"join specs {seen[value]!r} and {s.name!r} share the {what} {value!r}"
                    )
                seen[value] = s.name
    inputs = {t: s.name for s in specs for t in (s.events.topic, s.dimension.topic)}
    refuse_shared_inputs(
        (s.name, n, side)
        for s in specs
        for n, side in (("events", s.events), ("dimension", s.dimension))
    )
    for s in specs:
        if s.final_topic in inputs:
            raise SpecError(
                f"join spec {s.name!r} writes its promises to {s.final_topic}, "
                f"which join {inputs[s.final_topic]!r} reads"
            )
        if s.output in inputs:
            raise SpecError(
                f"join spec {s.name!r} writes {s.output}, which join "
                f"{inputs[s.output]!r} reads: a join must not feed itself"
            )
        if s.ticks in inputs:
            raise SpecError(
                f"join spec {s.name!r}: ticks topic {s.ticks} is an input of join "
                f"{inputs[s.ticks]!r}"
            )
    return specs


def copartition_groups(specs: Iterable[JoinSpec]) -> list[tuple[str, ...]]:
    """The topic groups that must be co-partitioned (one per spec)."""
    return [s.inputs for s in specs]


# --- the steps other kinds of spec reuse (app.joins.fk_spec) -------------------------------------

Config = TypeVar("Config", bound=BaseModel)


def validated(model: type[Config], raw: Any, index: int | None) -> tuple[Config, str]:
    """A spec as written (plain data, or already a ``model``) validated as ``model``, and how
    a message names it; a validation error is a :class:`SpecError` naming the spec (the one
    way in for every kind of spec)."""
    where = _where(raw, index)
    try:
        cfg = raw if isinstance(raw, model) else model.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(f"{where}: {_describe(exc)}") from None
    return cfg, _where({"name": getattr(cfg, "name", None)}, index)


def parse_start(spec: str, where: str, raw: str | None) -> str | int | None:
    """A ``start`` setting: earliest, latest, or epoch ms of an ISO-8601 time with a zone."""
    return _start(spec, where, raw)


def resolve_side(spec: str, side: str, cfg: SideConfig, start: str | int) -> Side:
    """One input resolved: its fields, paths, time and wire model (the rules of every side)."""
    return _side(spec, side, cfg, start)

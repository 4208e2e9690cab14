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

This module holds what a spec says: the spec as written (:class:`JoinConfig`, its
:class:`SideConfig` and :class:`TableNames`), the spec resolved (:class:`JoinSpec`, its two
:class:`Side`), the error and :func:`validated`, the one way in for every kind of spec. A side
is resolved by :mod:`app.joins.sides`, a spec and all of them together by
:mod:`app.joins.resolve`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from app.inputs.records import WireModel, join_key_text
from app.inputs.time_formats import KAFKA_TIMESTAMP
from app.logic.event_join import Event, JoinRules, Mode, Revision, derive_id
from app.logic.histories import AsOf, Version

__all__ = [
    "JoinConfig",
    "JoinSpec",
    "Side",
    "SideConfig",
    "SpecError",
    "TableNames",
    "validated",
]


class SpecError(ValueError):
    """A join spec that cannot work; the message says which spec, which field and why."""


class SideConfig(BaseModel):
    """One input topic of a join, as written in configuration."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    topic: str = Field(min_length=1)
    key: str | list[str] = Field(
        min_length=1,
        description="field (a dotted path: 'user.id') the record key equals (co-partitioning), "
        "or a composite key's fields in order (['tenant', 'user.id']): the record key is then "
        'their values as a JSON array, \'["acme","u1"]\'',
    )
    time: str = Field(
        min_length=1,
        description="event-time field (a path), or '$timestamp': the Kafka record timestamp",
    )
    time_format: Literal["epoch_ms", "epoch_s", "epoch_us", "epoch_ns", "iso8601"] = Field(
        "epoch_ms", description="how the time field writes the event time"
    )
    max_future_ms: int | None = Field(
        None,
        description="how far ahead of min(its Kafka timestamp, the wall clock) this side's "
        "event times may be (default ETJ_MAX_FUTURE_MS): versions effective later, such as "
        "a price list for next week; a record moves stream time only as far as "
        "ETJ_MAX_FUTURE_MS would let it",
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
    format: Literal["json", "json-sr", "avro", "protobuf"] = Field(
        "json",
        description="how values are written: JSON text, or Confluent Schema Registry framed "
        "JSON, Avro or Protobuf (needs ETJ_SCHEMA_REGISTRY_URL)",
    )
    key_format: Literal["str", "json", "long", "int", "avro"] = Field(
        "str",
        description="how record keys are written: UTF-8 text, JSON, a big-endian long (8 "
        "bytes) or int (4 bytes), or Schema Registry framed Avro; the key's canonical text "
        "must equal the key field's",
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
    output_format: Literal["json", "json-sr", "avro"] = Field(
        "json",
        description="how revisions are written: JSON text, or Schema Registry framed Avro or "
        "JSON with a schema registered under <output>-value (needs ETJ_SCHEMA_REGISTRY_URL)",
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
    #: a composite key's flat fields, in order (:attr:`key` is then the key as the spec writes
    #: it, not a field): the join key is their values as a JSON array (:func:`join_key_text`);
    #: empty: the key is the field :attr:`key`
    key_fields: tuple[str, ...] = ()
    #: its ``time_format`` is written out: an epoch time may then be a float or a string too
    time_given: bool = False
    #: this side's tolerance for records from the future (None: ``ETJ_MAX_FUTURE_MS``)
    max_future_ms: int | None = None

    @property
    def key_parts(self) -> tuple[str, ...]:
        """The flat fields the join key is made of: one, or a composite key's."""
        return self.key_fields or (self.key,)

    @property
    def key_is_text(self) -> bool:
        """Is the join key the key field itself (one field, a ``str``)? Else it is the text
        of an ``int`` key, or a composite key's JSON array (:func:`join_key_text`)."""
        return not self.key_fields and self.model.model_fields[self.key].annotation is not int

    @property
    def key_kinds(self) -> tuple[str, ...]:
        """The type of each key part (``str``, ``int``): two sides whose kinds differ never
        join."""
        return tuple(
            "int" if self.model.model_fields[f].annotation is int else "str" for f in self.key_parts
        )

    @cached_property
    def join_key(self) -> Callable[[Any], str]:
        """record -> its join key (the text its record key must equal, and the key of the
        join's state): the key field itself, an int's decimal text, or a composite key's JSON
        array (:func:`join_key_text`)."""
        if self.key_fields:
            get = attrgetter(*self.key_fields)
            return lambda r: join_key_text(get(r))
        get_one = attrgetter(self.key)
        if self.key_is_text:
            return get_one
        return lambda r: str(get_one(r))

    #: how its values are written (app.inputs.wire_formats.FORMATS)
    format: str = "json"
    #: how the keys of :attr:`topic` are written (app.inputs.wire_formats.KEY_FORMATS)
    key_format: str = "str"
    #: how the repartition hop writes the keys of :attr:`repartition` (the other side's
    #: key format when the join reads that side's own topic, so both co-partition by bytes)
    hop_key_format: str = "str"

    @property
    def input(self) -> str:
        """The topic the join's agent reads for this side: the repartition topic, or the
        user's topic itself."""
        return self.repartition or self.topic

    @property
    def input_key_format(self) -> str:
        """How the keys of :attr:`input` (what the join reads) are written."""
        return self.hop_key_format if self.repartition else self.key_format

    @property
    def framed(self) -> tuple[bool, bool]:
        """(keys, values) of :attr:`input` framed by the Schema Registry: the ids the loop
        fetches before it parses a batch (:mod:`app.kafka.schema_registry`)."""
        return self.input_key_format == "avro", self.format != "json"

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(self.model.model_fields)

    @property
    def shaped(self) -> bool:
        """Are its records read otherwise than flat with an epoch-ms time (then
        :func:`app.inputs.parsers.compile_shaped_parser` reads them)?"""
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

    def parser(
        self, schemas: Any = None, check_key: bool = True, key_format: str | None = None
    ) -> Any:
        """(key, value, timestamp=None, headers=None) -> the flat record, or InvalidRecord.
        ``schemas``: where writer schemas are found
        (:class:`app.kafka.schema_registry.SchemaRegistry`), for a framed format;
        ``check_key`` False: the record key is not compared (a repartition hop's read);
        ``key_format``: the keys' (default: :attr:`input_key_format`)."""
        from app.joins.side_parsers import side_parser

        return side_parser(self, schemas, check_key, key_format)


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
    #: how revisions are written: json, or Schema Registry framed avro or json-sr
    #: (app.outputs.revision_formats)
    output_format: str = "json"
    #: the events' flat field that numbers an id's events, kept last in the payload (a join
    #: fed by another join: the upstream revision's ``revision``, :mod:`app.joins.chains`);
    #: None: an id's last event wins
    order_field: str | None = None
    #: its output is an internal link between dimensions (:mod:`app.joins.dimensions`)
    internal_output: bool = False
    #: a link of a multi-dimension spec: the name of the dimension it joins. Its revisions
    #: carry ``dimension`` (last, after ``cause``): this name when the link's own dimension
    #: changed the answer, else what the upstream revision said (the event's ``dimension``
    #: field; none for the first link: the event itself is new or changed)
    dimension_name: str | None = None
    #: a link before the last: (the next link's key fields, its key format): its revisions are
    #: keyed by the next link's join key, so the next link reads the link topic as it is, with
    #: no hop (:mod:`app.joins.dimensions`); None: keyed by join id
    output_key: tuple[tuple[str, ...], str] | None = None

    @property
    def final_topic(self) -> str | None:
        """``<output>-final``: the finality promises (None: the spec publishes none)."""
        return f"{self.output}-final" if self.finality or self.emit == "final" else None

    @cached_property
    def rules(self) -> JoinRules:
        return JoinRules(self.asof, self.mode, self.hold_ms, self.order_field is not None)

    @cached_property
    def payload_fields(self) -> tuple[str, ...]:
        """Event fields kept in state besides the key, the join id and the event time: the
        copied ones, then :attr:`order_field` (the rules read it last; the output only where
        it is copied too)."""
        ev = self.events
        copied = tuple(f for f in ev.copy if f != ev.time and not (ev.key_is_text and f == ev.key))
        return copied + ((self.order_field,) if self.order_field else ())

    @cached_property
    def output_fields(self) -> tuple[str, ...]:
        dim = self.dimension.copy
        return (
            "id",
            *self.output_event_fields,
            *dim,
            self.time_as,
            "revision",
            *(f"previous_{f}" for f in dim),
            "cause",
            *(("dimension",) if self.dimension_name else ()),
        )

    @property
    def output_event_fields(self) -> tuple[str, ...]:
        """The events' copied fields the output carries where they are copied (a link's
        upstream ``dimension`` goes last, as its own: :attr:`dimension_name`)."""
        if self.dimension_name is None:
            return self.events.copy
        return tuple(f for f in self.events.copy if f != "dimension")

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
        return self.events.join_key

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
        get_all: Callable[[Any], tuple[Any, ...]] = attrgetter(*fields)  # a tuple: two or more
        return get_all

    def version_of(self, record: WireModel) -> Version:
        """``[event_time, *copied values]`` of a validated dimension record."""
        return [
            getattr(record, self.dimension.time),
            *(getattr(record, f) for f in self.dimension.copy),
        ]

    def key_of(self, record: WireModel, side: Side) -> str:
        """The join key of a validated record of ``side`` (:attr:`Side.join_key`)."""
        return side.join_key(record)

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
        for f in self.output_event_fields:
            src = (
                "r.key"
                if f == self.events.key and self.events.key_is_text
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
        if self.dimension_name is not None:
            up = f"p[{payload.index('dimension')}]" if "dimension" in payload else "None"
            own = repr(self.dimension_name)
            items.append(("dimension", f"({up} if r.cause == 'arrival' else {own})"))
        body = ", ".join(f"{name!r}: {src}" for name, src in items)
        source = (
            f"def to_wire(r):\n    p = r.payload\n    a = r.answer or NONE\n"
            f"    v = r.previous or NONE\n    return {{{body}}}\n"
        )
        scope: dict[str, Any] = {"NONE": (None,) * len(dim)}
        exec(compile(source, f"<to_wire of join {self.name}>", "exec"), scope)
        made: Callable[[Revision], dict[str, Any]] = scope["to_wire"]
        return made

    @cached_property
    def out_key(self) -> Callable[[dict[str, Any], str], bytes]:
        """(revision as wire, join id) -> the output record's key: the join id, or a link's
        next join key (:attr:`output_key`) written as a repartition hop would write it."""
        from app.inputs.wire_formats import encode_key

        if self.output_key is None:
            return lambda wire, jid: jid.encode()
        fields, fmt = self.output_key
        if len(fields) == 1:
            (f,) = fields
            return lambda wire, jid: encode_key(str(wire[f]), fmt)
        return lambda wire, jid: encode_key(join_key_text(wire[f] for f in fields), fmt)

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
                "format": s.format,
                "key_format": s.key_format,
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
            "output_format": self.output_format,
            **({"order": self.events.path_of(self.order_field)} if self.order_field else {}),
        }


# --- a spec as written, validated (every kind: app.joins.resolve, app.joins.fk_spec) -------------

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

"""A join spec resolved: as written (plain data, or a :class:`~app.joins.spec.JoinConfig`) into
the :class:`~app.joins.spec.JoinSpec` the engine runs, each spec on its own (:func:`resolve`: its
sides by :mod:`app.joins.sides`, then what only shows across them), then every spec together
(:func:`resolve_all`: shared names, a join that reads another's output:
:mod:`app.joins.chains`). Every refusal is a :class:`~app.joins.spec.SpecError` that names the
spec and the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from app.inputs.wire_formats import FRAMED, REHOP_KEY_FORMATS
from app.joins import chains, dimensions
from app.joins.sides import is_json, parse_start, repartition_of, resolve_side
from app.joins.spec import JoinConfig, JoinSpec, Side, SpecError, TableNames, validated

__all__ = [
    "RESERVED_OUTPUT_FIELDS",
    "copartition_groups",
    "refuse_without_registry",
    "resolve",
    "resolve_all",
    "shared_inputs",
]


#: the fields the agent adds to every revision (app.agents.event_join): a copied field of one of
#: these names would be overwritten
RESERVED_OUTPUT_FIELDS = ("partition", "source")


def resolve(
    raw: dict[str, Any] | JoinConfig,
    index: int | None = None,
    app_id: str = "etj",
    order: str | None = None,
) -> JoinSpec:
    """Validate one spec (plain data or a :class:`JoinConfig`) and resolve it. ``app_id``
    (``ETJ_APP_ID``) names a repartitioned side's internal topic; ``order``: the events' path
    that numbers an id's events (a join fed by another's output: :mod:`app.joins.chains`)."""
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
    start = parse_start(where, "start", cfg.start) or "earliest"
    events = resolve_side(
        where,
        "events",
        cfg.events,
        parse_start(where, "events.start", cfg.events.start) or start,
        repartition_of(where, "events", cfg.events, app_id, cfg.name),
    )
    dimension = resolve_side(
        where,
        "dimension",
        cfg.dimension,
        parse_start(where, "dimension.start", cfg.dimension.start) or start,
        repartition_of(where, "dimension", cfg.dimension, app_id, cfg.name),
    )
    if events.key_kinds != dimension.key_kinds:
        kinds = [
            "(" + ", ".join(k) + ")" if len(k) > 1 else k[0]
            for k in (events.key_kinds, dimension.key_kinds)
        ]
        raise SpecError(
            f"{where}: events.key is {kinds[0]} but dimension.key is {kinds[1]}: they "
            "never match (a join key is compared as its text: a str '42' is not an int 42)"
        )
    for f in dimension.copy:
        if is_json(dimension, f):
            raise SpecError(
                f"{where}: dimension.copy field {dimension.path_of(f)!r} is json: versions "
                "at one time are ordered by their copied values, and an object has no "
                "order; copy it from the events side, or declare it str"
            )
    if cfg.output_format == "avro":
        for f in events.copy:
            if is_json(events, f):
                raise SpecError(
                    f"{where}: events.copy field {events.path_of(f)!r} is json: an Avro "
                    "revision has no type for any JSON value; copy it into a JSON or JSON-SR "
                    "output (output_format json, json-sr)"
                )
    if cfg.events.id is None:
        for f in events.copy:
            if is_json(events, f):
                raise SpecError(
                    f"{where}: events.copy field {events.path_of(f)!r} is json: a join "
                    "id is derived from the copied fields' text, and an object's is not "
                    "one; give events.id (the field holding the join id)"
                )
    events, dimension = _key_formats(where, events, dimension)
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
    order_field = None if order is None else {p: f for f, p in events.paths}.get(order, order)
    if order_field is not None and events.model.model_fields.get(order_field, None) is None:
        raise SpecError(
            f"{where}: events: a join fed by another join's output reads its {order!r} (the "
            "revision numbers); the events model has no such field"
        )
    if order_field is not None and events.model.model_fields[order_field].annotation is not int:
        raise SpecError(f"{where}: events field {order!r}: a revision number, declare it 'int'")
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
        output_format=cfg.output_format,
        order_field=order_field,
    )
    _check_hold(where, cfg)
    out = spec.output_fields
    taken = sorted(set(out) & set(RESERVED_OUTPUT_FIELDS))
    if taken:
        raise SpecError(
            f"{where}: output field {taken[0]!r} is etj's own (each revision carries "
            f"{' and '.join(RESERVED_OUTPUT_FIELDS)}: the partition whose promise covers it "
            f'and its lineage); rename it in copy ({{"{taken[0]}": "name"}})'
        )
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


def _key_formats(where: str, events: Side, dimension: Side) -> tuple[Side, Side]:
    """The sides with the key format each repartition hop writes (``hop_key_format``).

    Kafka puts a record in the partition of its key's **bytes**, so the two inputs a join reads
    are co-partitioned only if their keys are written alike: the same ``key_format`` when it
    reads both topics as they are; a hop writes the other side's (text, a long or an int, as
    Kafka's serializers do), or text when both sides are repartitioned."""
    sides = {"events": events, "dimension": dimension}
    direct = {n: s for n, s in sides.items() if s.repartition is None}
    if len(direct) == 2 and events.key_format != dimension.key_format:
        raise SpecError(
            f"{where}: events.key_format {events.key_format!r} and dimension.key_format "
            f"{dimension.key_format!r} differ: Kafka partitions a record by its key's bytes, "
            "so a key would be in one partition of the events and another of the dimension; "
            'write both keys alike, or give one side "repartition": true'
        )
    out = dict(sides)
    for name, side in sides.items():
        if side.repartition is None:
            continue
        other_name = "dimension" if name == "events" else "events"
        other = sides[other_name]
        hop = other.key_format if other.repartition is None else "str"
        if hop not in REHOP_KEY_FORMATS:
            raise SpecError(
                f"{where}: {name}.repartition: the hop would have to write keys as "
                f"{other_name}.key_format {hop!r}, which it cannot write exactly (it writes "
                f"{', '.join(REHOP_KEY_FORMATS)}); repartition both sides"
            )
        out[name] = dataclasses.replace(side, hop_key_format=hop)
    return out["events"], out["dimension"]


def refuse_without_registry(specs: list[JoinSpec], registry_url: str | None) -> list[JoinSpec]:
    """``specs``, or a refusal of one that reads or writes a Schema Registry format when no
    registry is set (``ETJ_SCHEMA_REGISTRY_URL``): what the worker and ``archive`` check
    before they start."""
    if registry_url:
        return specs
    for spec in specs:
        needs = [
            f"{name}.{what} {value!r}"
            for name, side in (("events", spec.events), ("dimension", spec.dimension))
            for what, value in (("format", side.format), ("key_format", side.key_format))
            if value in FRAMED
        ]
        if spec.output_format in FRAMED:
            needs.append(f"output_format {spec.output_format!r}")
        if needs:
            raise SpecError(
                f"join spec {spec.name!r}: {needs[0]} needs a Schema Registry: set "
                "ETJ_SCHEMA_REGISTRY_URL (docs/joins/declarative.md#schema-registry-formats)"
            )
    return specs


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


def shared_inputs(
    sides: Iterable[tuple[str, str, Side]],
) -> dict[str, tuple[tuple[str, ...], Any]]:
    """Topic -> (the joins that read it, in order, and its start); ``sides``: (join name,
    side name, side). Several joins may read one topic: the worker hands each of them every
    record and commits an offset once all of them are done with it
    (:mod:`app.compat.consumer`). Refused: two joins reading it from different ``start``s
    (the worker reads a topic once, from one offset, so one of them would not be honoured: the
    refusal names both). One spec's sides read topics of their own (refused by each spec)."""
    seen: dict[str, list[tuple[str, str, Any]]] = {}
    for name, side_name, side in sides:
        readers = seen.setdefault(side.topic, [])
        for other, other_side, start in readers:
            if start != side.start:
                raise SpecError(
                    f"join specs {other!r} ({other_side}) and {name!r} ({side_name}) both "
                    f"read {side.topic} but start at {start!r} and {side.start!r}: a worker "
                    "reads a topic once, for every join that reads it, from one start; give "
                    "both the same start"
                )
        readers.append((name, side_name, side.start))
    return {t: (tuple(r[0] for r in rs), rs[0][2]) for t, rs in seen.items()}


def resolve_all(raws: Sequence[dict[str, Any] | JoinConfig], app_id: str = "etj") -> list[JoinSpec]:
    """Resolve every spec, then refuse what only shows across specs (shared names, loops). A
    spec whose events are another's output reads that join's revisions in order
    (:mod:`app.joins.chains`); a spec with several dimensions is first expanded into a chain
    of one-dimension links (:mod:`app.joins.dimensions`)."""
    raws, links, labels = dimensions.expand_all(raws, app_id)
    cfgs = [validated(JoinConfig, raw, i)[0] for i, raw in enumerate(raws)]
    fed = chains.fed_by(cfgs)
    specs = [
        resolve(chains.ordered_config(c), i, app_id, chains.ORDER_PATH)
        if i in fed
        else resolve(c, i, app_id)
        for i, c in enumerate(cfgs)
    ]
    # a link topic the next link reads as it is is keyed by that link's join key
    direct = {s.events.topic: s.events for s in specs if s.events.repartition is None}
    specs = [
        dataclasses.replace(
            s,
            internal_output=s.output in links,
            dimension_name=labels.get(s.name),
            output_key=(
                (direct[s.output].key_parts, direct[s.output].key_format)
                if s.output in links and s.output in direct
                else None
            ),
        )
        for s in specs
    ]
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
    chains.check_links(specs)
    inputs = {t: s.name for s in specs for t in (s.events.topic, s.dimension.topic)}
    shared_inputs(
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
        if s.ticks in inputs:
            raise SpecError(
                f"join spec {s.name!r}: ticks topic {s.ticks} is an input of join "
                f"{inputs[s.ticks]!r}"
            )
    return specs


def copartition_groups(specs: Iterable[JoinSpec]) -> list[tuple[str, ...]]:
    """The topic groups that must be co-partitioned (one per spec)."""
    return [s.inputs for s in specs]

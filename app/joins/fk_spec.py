"""Foreign-key join specs (``"kind": "foreign-key"``): a left table joined with a right table on
a field of the left row, each the latest version per key
(docs/joins/declarative.md#foreign-key-joins).

The spec names two sides written as an event-time spec's (dotted paths, time formats,
``$timestamp``, ``start``, ``fields`` or ``model``: :func:`app.joins.sides.resolve_side`), plus
the left side's ``foreign_key`` and each side's ``time_as``; an internal ``moves`` topic
(left rows entering and leaving a right key, keyed by it) and a ``ticks`` topic; three tables.
The built-in car join is one (:mod:`app.joins.catalog`), so its names fix the shapes here:

- output (keyed by the left key): the left key, the foreign key under the right key's name, the
  left side's copies, the right side's, the left ``time_as``, the right ``time_as``
  (``car_id, zone_id, fuel_level, pollution_level, car_event_time, zone_event_time``);
- a move: ``op``, the right key it concerns (under the right key's name), then the left row's
  key, foreign key (``left_<name>`` if it has the right key's name), copies and time under
  their names.

Every mistake is a :class:`~app.joins.spec.SpecError` naming the spec and the field, raised
at import time like an event-time spec's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.inputs.records import InvalidRecord
from app.inputs.time_formats import KAFKA_TIMESTAMP
from app.joins.resolve import shared_inputs
from app.joins.sides import parse_start, resolve_side
from app.joins.spec import JoinSpec, Side, SideConfig, SpecError, validated
from app.logic.fk_join import Joined, Left, Move, Right

__all__ = [
    "FK_KIND",
    "FkJoinConfig",
    "FkJoinSpec",
    "FkTableNames",
    "check_together",
    "is_foreign_key",
    "resolve_fk",
]

FK_KIND = "foreign-key"
#: the types a key or a foreign key may have (they are table keys and index key parts)
_KEY_TYPES = (int, str)


def is_foreign_key(raw: Any) -> bool:
    """Is this raw spec a foreign-key one (else an event-time one: ``kind`` omitted)?"""
    kind = raw.get("kind") if isinstance(raw, dict) else getattr(raw, "kind", None)
    return kind is not None


class FkLeftConfig(SideConfig):
    """The left table's topic: its key, foreign key, copied fields and time."""

    foreign_key: str = Field(
        min_length=1, description="field (a path) holding the right key this row points at"
    )


class FkTableNames(BaseModel):
    """The names of a foreign-key join's three tables (and so of their changelog topics)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    left: str = Field(min_length=1, description="left key -> its newest version")
    right: str = Field(min_length=1, description="right key -> its newest version")
    index: str = Field(
        min_length=1,
        description="(right key, left key) -> the left rows pointing at a right key (range scans)",
    )


class FkJoinConfig(BaseModel):
    """A foreign-key join spec as written in configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["foreign-key"]
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,39}$")
    left: FkLeftConfig
    right: SideConfig
    output: str = Field(min_length=1)
    moves: str = Field(min_length=1, description="internal topic of moves, keyed by right key")
    ticks: str = Field(min_length=1, description="internal topic waking the right side up")
    start: str | None = None
    partitions: int | None = Field(None, ge=1)
    tables: FkTableNames | None = None


@dataclass(frozen=True)
class FkJoinSpec:
    """A validated foreign-key join: the names the engine, the state and the batch twin use."""

    name: str
    left: Side
    right: Side
    #: the left side's flat field holding the right key
    fk: str
    left_time_as: str
    right_time_as: str
    output: str
    moves: str
    ticks: str
    tables: FkTableNames
    partitions: int | None = None
    kind: str = FK_KIND

    # --- names -----------------------------------------------------------------------------
    @property
    def fk_as(self) -> str:
        """The output's (and a move's) name of the right key: the right side's key field."""
        return self.right.key

    @property
    def output_fields(self) -> tuple[str, ...]:
        return (
            self.left.key,
            self.fk_as,
            *self.left.copy,
            *self.right.copy,
            self.left_time_as,
            self.right_time_as,
        )

    @property
    def move_fk(self) -> str:
        """A move's name of the left row's foreign key: its own, or ``left_<name>`` when that
        is the right key's name (which a move gives the right key it concerns)."""
        return self.fk if self.fk != self.fk_as else f"left_{self.fk}"

    @property
    def move_fields(self) -> tuple[str, ...]:
        return ("op", self.fk_as, self.left.key, self.move_fk, *self.left.copy, self.left.time)

    @property
    def right_inputs(self) -> tuple[str, str, str]:
        """The right side's co-partitioned topics (keyed by right key): right, moves, ticks."""
        return (self.right.topic, self.moves, self.ticks)

    @property
    def int_keys(self) -> bool:
        """Are the right key and the left key ints (then the index keys are the car join's
        16 bytes, :mod:`app.state.ordered_keys`)?"""
        return (
            _annotation(self.right, self.right.key) is int
            and _annotation(self.left, self.left.key) is int
        )

    @property
    def right_key_type(self) -> Any:
        """The right key's type (a view parses a key from a URL with it)."""
        return _annotation(self.right, self.right.key)

    # --- records <-> the rules' values -------------------------------------------------------
    def left_of(self, rec: Any) -> Left:
        return Left(
            getattr(rec, self.left.key),
            getattr(rec, self.fk),
            tuple(getattr(rec, f) for f in self.left.copy),
            getattr(rec, self.left.time),
        )

    def right_of(self, rec: Any) -> Right:
        return Right(
            getattr(rec, self.right.key),
            tuple(getattr(rec, f) for f in self.right.copy),
            getattr(rec, self.right.time),
        )

    def to_wire(self, out: Joined) -> dict[str, Any]:
        """One output as the output topic carries it (:attr:`output_fields` order)."""
        left, right = out.left, out.right
        wire = {self.left.key: left.key, self.fk_as: left.fk}
        wire.update(zip(self.left.copy, left.values))
        if right is None or not right.values:  # none, or an end (a tombstone): no values
            wire.update((f, None) for f in self.right.copy)
        else:
            wire.update(zip(self.right.copy, right.values))
        wire[self.left_time_as] = left.event_time
        wire[self.right_time_as] = None if right is None else right.event_time
        return wire

    def from_wire(self, wire: dict[str, Any]) -> Joined:
        """An output record back as the rules' value (tests, the consumer rule)."""
        left = Left(
            wire[self.left.key],
            wire[self.fk_as],
            tuple(wire[f] for f in self.left.copy),
            wire[self.left_time_as],
        )
        t = wire[self.right_time_as]
        values = tuple(wire[f] for f in self.right.copy)
        if all(v is None for v in values):  # copies are required: null ones are an end's
            values = ()
        right = None if t is None else Right(left.fk, values, t)
        return Joined(left, right)

    def move_to_wire(self, move: Move) -> dict[str, Any]:
        left = move.left
        wire = {"op": move.op, self.fk_as: move.fk, self.left.key: left.key, self.move_fk: left.fk}
        wire.update(zip(self.left.copy, left.values or [None] * len(self.left.copy)))  # an end
        wire[self.left.time] = left.event_time
        return wire

    def move_of(self, wire: Any) -> Move:
        """A move record read back; raises :class:`InvalidRecord` (it is internal: written by
        this code, so only a foreign producer makes one bad)."""
        try:
            op = wire["op"]
            if op not in ("ADD", "DEL"):
                raise InvalidRecord(f"move op {op!r} is neither ADD nor DEL")
            fk = wire[self.move_fk]  # None: an end's DEL (a tombstone), with no values
            return Move(
                op,
                wire[self.fk_as],
                Left(
                    wire[self.left.key],
                    fk,
                    () if fk is None else tuple(wire[f] for f in self.left.copy),
                    wire[self.left.time],
                ),
            )
        except (KeyError, TypeError) as exc:
            raise InvalidRecord(f"not a move of join {self.name!r}: missing {exc}") from None

    def describe(self) -> dict[str, Any]:
        """What ``GET /joins/`` lists for this spec: its kind, sides, keys and tables."""

        def side(s: Side, time_as: str) -> dict[str, Any]:
            return {
                "topic": s.topic,
                "key": s.key,
                "time": s.time,
                "copy": list(s.copy),
                "fields": list(s.field_names),
                "time_format": s.time_format,
                "start": s.start,
                "time_as": time_as,
                **({"paths": dict(s.paths)} if s.shaped else {}),
            }

        return {
            "name": self.name,
            "kind": self.kind,
            "left": {**side(self.left, self.left_time_as), "foreign_key": self.fk},
            "right": side(self.right, self.right_time_as),
            "output": self.output,
            "output_fields": list(self.output_fields),
            "moves": self.moves,
            "ticks": self.ticks,
            "partitions": self.partitions,
            "tables": self.tables.model_dump(),
        }


def _annotation(side: Side, flat: str) -> Any:
    return side.model.model_fields[flat].annotation


# --- resolution ----------------------------------------------------------------------------------


def resolve_fk(raw: dict[str, Any] | FkJoinConfig, index: int | None = None) -> FkJoinSpec:
    """Validate one foreign-key spec (plain data or an :class:`FkJoinConfig`) and resolve it."""
    cfg, where = validated(FkJoinConfig, raw, index)
    for name, side in (("left", cfg.left), ("right", cfg.right)):
        if side.id is not None:
            raise SpecError(
                f"{where}: {name}.id: a foreign-key join has no join id (its "
                f"output is keyed by the left key)"
            )
        if getattr(side, "repartition", False):
            raise SpecError(
                f"{where}: {name}.repartition: a foreign-key join reads its sides "
                f"keyed by their key field; re-key the topic first (an event-time "
                f"spec's side can repartition)"
            )
        if not isinstance(side.key, str):
            raise SpecError(
                f"{where}: {name}.key: a foreign-key join's key is one field (its tables are "
                "keyed by it); a composite key is for an event-time spec's side"
            )
        if side.max_future_ms is not None:
            raise SpecError(
                f"{where}: {name}.max_future_ms: a foreign-key join keeps each key's newest "
                "version, so a version effective later would answer at once; versions "
                "effective later are for an event-time spec's side"
            )
        if not side.time_as:
            raise SpecError(
                f"{where}: {name}.time_as: missing (the output field carrying the "
                f"{name} version's event time, e.g. 'car_event_time')"
            )
    if not cfg.right.copy_fields:
        raise SpecError(f"{where}: right.copy is empty: a join must copy at least one field")
    for name, side_cfg in (("left", cfg.left), ("right", cfg.right)):
        for what, value, default in (
            ("format", side_cfg.format, "json"),
            ("key_format", side_cfg.key_format, "str"),
        ):
            if value != default:
                raise SpecError(
                    f"{where}: {name}.{what} {value!r}: a foreign-key join reads "
                    f"{what} {default!r} only "
                    "for now (Schema Registry formats and binary keys are for event-time "
                    "joins)"
                )
    start = parse_start(where, "start", cfg.start) or "earliest"
    fk_entry = cfg.left.foreign_key
    left = resolve_side(
        where, "left", cfg.left, parse_start(where, "left.start", cfg.left.start) or start
    )
    flat_of = {path: flat for flat, path in left.paths} or {f: f for f in left.field_names}
    if fk_entry not in flat_of:
        raise SpecError(
            f"{where}: left.foreign_key names {fk_entry!r}, a field "
            f"{cfg.left.topic} records do not have (they have: "
            f"{', '.join(p for p in flat_of if p != KAFKA_TIMESTAMP)})"
        )
    fk = flat_of[fk_entry]
    right = resolve_side(
        where, "right", cfg.right, parse_start(where, "right.start", cfg.right.start) or start
    )
    if fk_entry == KAFKA_TIMESTAMP or fk in (left.key, left.time):
        raise SpecError(
            f"{where}: left.foreign_key {fk_entry!r} must be a field of its own, "
            "not the key nor the time"
        )
    if fk in left.copy:
        raise SpecError(
            f"{where}: left.copy lists the foreign key {fk_entry!r}: the output "
            f"carries it as {right.key!r} already"
        )
    for name, resolved, fields in (
        ("left", left, (left.key, fk, *left.copy)),
        ("right", right, (right.key, *right.copy)),
    ):
        for f in fields:
            if not resolved.model.model_fields[f].is_required():
                raise SpecError(
                    f"{where}: {name} field {resolved.path_of(f)!r} is optional, but "
                    "versions are ordered by it (and null means 'no version'); "
                    "declare it required"
                )
    types = {
        what: _annotation(s, f)
        for what, s, f in (
            ("left.key", left, left.key),
            ("left.foreign_key", left, fk),
            ("right.key", right, right.key),
        )
    }
    for what, t in types.items():
        if t not in _KEY_TYPES:
            raise SpecError(
                f"{where}: {what} is of type {getattr(t, '__name__', t)}; a key is an int or a str"
            )
    if types["left.foreign_key"] is not types["right.key"]:
        raise SpecError(
            f"{where}: left.foreign_key is {types['left.foreign_key'].__name__} "
            f"but right.key is {types['right.key'].__name__}: they never match"
        )
    topics = [cfg.left.topic, cfg.right.topic, cfg.moves, cfg.ticks, cfg.output]
    if len(set(topics)) != len(topics):
        raise SpecError(
            f"{where}: left {cfg.left.topic}, right {cfg.right.topic}, moves "
            f"{cfg.moves}, ticks {cfg.ticks} and output {cfg.output} must be five "
            "different topics"
        )
    spec = FkJoinSpec(
        cfg.name,
        left,
        right,
        fk,
        cfg.left.time_as or "",
        cfg.right.time_as or "",
        cfg.output,
        cfg.moves,
        cfg.ticks,
        cfg.tables
        or FkTableNames(
            left=f"{cfg.name}-left", right=f"{cfg.name}-right", index=f"{cfg.name}-index"
        ),
        cfg.partitions,
    )
    for what, names in (("output", spec.output_fields), ("move", spec.move_fields)):
        dupes = sorted({f for f in names if names.count(f) > 1})
        if dupes:
            raise SpecError(
                f"{where}: {what} fields collide: {', '.join(dupes)} (the {what} "
                f"carries {', '.join(_shape(what))}); rename a copied field with "
                '{"path": "name"}'
            )
    return spec


def _shape(what: str) -> list[str]:
    if what == "output":
        return [
            "left.key",
            "right.key (the foreign key)",
            "left.copy",
            "right.copy",
            "left.time_as",
            "right.time_as",
        ]
    return ["op", "right.key", "left.key", "left.foreign_key", "left.copy", "left.time"]


def check_together(event_specs: Sequence[JoinSpec], fk_specs: Sequence[FkJoinSpec]) -> None:
    """Refuse what only shows across specs of both kinds: a shared name, table, internal or
    output topic, an output another join reads, a topic read from two starts."""
    seen: dict[tuple[str, str], str] = {}

    def claim(what: str, value: str, owner: str) -> None:
        if (what, value) in seen:
            raise SpecError(
                f"join specs {seen[(what, value)]!r} and {owner!r} share the {what} {value!r}"
            )
        seen[(what, value)] = owner

    for s in event_specs:
        claim("name", s.name, s.name)
        for t in (s.ticks, s.output, *filter(None, [s.final_topic])):  # <output>-final too
            claim("topic", t, s.name)
        for n in s.tables.model_dump().values():
            if n is not None:
                claim("table name", n, s.name)
    for f in fk_specs:
        claim("name", f.name, f.name)
        for t in (f.moves, f.ticks, f.output):
            claim("topic", t, f.name)
        for n in f.tables.model_dump().values():
            claim("table name", n, f.name)
    reads = shared_inputs(
        [
            *(
                (s.name, n, side)
                for s in event_specs
                for n, side in (("events", s.events), ("dimension", s.dimension))
            ),
            *(
                (f.name, n, side)
                for f in fk_specs
                for n, side in (("left", f.left), ("right", f.right))
            ),
        ]
    )
    # an event-time join's output read as another's events: a chain (app.joins.chains)
    fed = {s.events.topic for s in event_specs}
    for name, written in [
        *((s.name, (s.output, s.ticks, *filter(None, [s.final_topic]))) for s in event_specs),
        *((f.name, (f.output, f.moves, f.ticks)) for f in fk_specs),
    ]:
        for t in written:
            chained = t in fed and any(s.output == t for s in event_specs)
            others = [j for j in reads.get(t, ((), None))[0] if j != name]
            if others and not chained:
                raise SpecError(
                    f"join spec {name!r} writes {t}, which join "
                    f"{others[0]!r} reads: a join must not feed another's "
                    "inputs"
                )

"""The typed columns of a join's topics, read off its wire models (no Spark, no Faust).

The ``archive`` command writes a join's topics as Parquet with these columns, and the batch
twin reads and validates archives by them (:mod:`app.batch.archives`), so a spec's records are
typed and checked alike on both sides whether the spec names a model (``app.inputs.records:MoodIn``)
or declares ``fields``. A column carries what the wire model checks that a typed column can
still show: required or not, string lengths, integer bounds, finite floats.

Shapes: :class:`Column` per field, in the model's field order; an output topic's columns follow
:attr:`app.joins.spec.JoinSpec.output_fields`.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, replace
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen

from app.inputs.records import WireModel
from app.joins.fk_spec import FkJoinSpec
from app.joins.spec import JoinSpec

__all__ = ["Column", "Kind", "fk_output_columns", "model_columns", "output_columns", "ARROW_TYPES"]

#: ``json``: a spec's ``json`` field (any JSON value), a string column holding its JSON text (an
#: object's or an array's, compact; a string's own text), as Spark's JSON reader reads such a
#: value into a string column
Kind = Literal["str", "int", "float", "bool", "json"]
_KINDS: dict[Any, Kind] = {str: "str", int: "int", float: "float", bool: "bool", Any: "json"}
#: Parquet (pyarrow) type alias of each kind
ARROW_TYPES: dict[Kind, str] = {
    "str": "string",
    "int": "int64",
    "float": "double",
    "bool": "bool",
    "json": "string",
}


@dataclass(frozen=True)
class Column:
    """One field of a topic's records, typed, with the checks a column can repeat."""

    name: str
    kind: Kind
    required: bool = True
    min_length: int | None = None
    max_length: int | None = None
    ge: int | None = None  # integers: smallest allowed
    lt: int | None = None  # integers: first value not allowed
    finite: bool = False  # floats: NaN and infinities refused

    @property
    def arrow(self) -> str:
        return ARROW_TYPES[self.kind]


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """``Annotated[T, ...]`` -> (T, its constraints); the constraints of a ``FieldInfo`` in it
    (what ``Field(max_length=...)`` inside ``Annotated`` becomes) are taken out of it."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return annotation, []
    base, *extras = typing.get_args(annotation)
    found: list[Any] = []
    for extra in extras:
        found.extend(getattr(extra, "metadata", None) or [extra])
    return base, found


def _kind(annotation: Any) -> tuple[Kind, bool, list[Any]]:
    """(kind, optional, constraints) of a field annotation: ``str``, ``int | None``,
    ``Annotated[str, Field(max_length=9)] | None`` ..."""
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(rest) < len(typing.get_args(annotation))
        annotation = rest[0] if len(rest) == 1 else annotation
    base, constraints = _unwrap(annotation)
    if base in _KINDS:
        return _KINDS[base], optional, constraints
    raise TypeError(
        f"a wire field of type {annotation!r} has no column type (str, int, float, "
        "bool, json, optionally None)"
    )


def model_columns(model: type[WireModel]) -> list[Column]:
    """The columns of ``model``'s records, in field order."""
    out = []
    for name, field in model.model_fields.items():
        kind, optional, constraints = _kind(field.annotation)
        col = Column(name, kind, required=field.is_required() and not optional)
        for m in [*constraints, *field.metadata]:
            if isinstance(m, MinLen):
                col = replace(col, min_length=m.min_length)
            elif isinstance(m, MaxLen):
                col = replace(col, max_length=m.max_length)
            elif isinstance(m, Ge):
                col = replace(col, ge=int(m.ge))  # type: ignore[call-overload]  # a protocol in annotated_types; an int here
            elif isinstance(m, Gt):
                col = replace(col, ge=int(m.gt) + 1)  # type: ignore[call-overload]  # a protocol in annotated_types; an int here
            elif isinstance(m, Lt):
                col = replace(col, lt=int(m.lt))  # type: ignore[call-overload]  # a protocol in annotated_types; an int here
            elif isinstance(m, Le):
                col = replace(col, lt=int(m.le) + 1)  # type: ignore[call-overload]  # a protocol in annotated_types; an int here
            elif getattr(m, "allow_inf_nan", True) is False:
                col = replace(col, finite=True)
        out.append(col)
    return out


def output_columns(spec: JoinSpec) -> list[Column]:
    """The columns of ``spec``'s output revision log: every field nullable but the id, the
    revision and what the events side requires; no other check (a revision that breaks one is
    the stream's mistake, for ``reconcile`` to report, not to drop)."""

    def typed(c: Column) -> Column:
        return Column(c.name, c.kind, c.required)

    events = {c.name: typed(c) for c in model_columns(spec.events.model)}
    dims = {c.name: typed(c) for c in model_columns(spec.dimension.model)}
    out = [Column("id", "str")]
    out += [events[f] for f in spec.output_event_fields]
    out += [replace(dims[f], required=False) for f in spec.dimension.copy]
    out.append(Column(spec.time_as, "int", required=False))
    out.append(Column("revision", "int"))
    out += [replace(dims[f], name=f"previous_{f}", required=False) for f in spec.dimension.copy]
    out.append(Column("cause", "str", required=False))
    if spec.dimension_name is not None:
        out.append(Column("dimension", "str", required=False))
    return out


def fk_output_columns(spec: FkJoinSpec) -> list[Column]:
    """The columns of a foreign-key join's output (``spec.output_fields``): the left side's as
    it requires them, the right side's nullable (no right version yet)."""
    left = {c.name: Column(c.name, c.kind, c.required) for c in model_columns(spec.left.model)}
    right = {c.name: Column(c.name, c.kind, False) for c in model_columns(spec.right.model)}
    return [
        left[spec.left.key],
        Column(spec.fk_as, left[spec.fk].kind),
        *(left[f] for f in spec.left.copy),
        *(right[f] for f in spec.right.copy),
        Column(spec.left_time_as, "int"),
        Column(spec.right_time_as, "int", False),
    ]

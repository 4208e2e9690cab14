"""Several dimensions per spec (issue AA item 1): ``"dimensions": [...]`` expanded into a chain
of one-dimension joins (docs/joins/declarative.md#several-dimensions).

Why a chain: every link is then an ordinary :class:`~app.joins.spec.JoinSpec`, so it reuses
the join state, the repartition hops, the fingerprints, the views and the order rule of
:mod:`app.joins.chains` (an id's older upstream revision changes nothing). Nothing new runs:
:func:`expand` rewrites the spec as written, before :func:`app.joins.resolve.resolve_all`
looks for chains.

The spec ``<name>`` with dimensions ``d1..dn`` becomes links ``<name>-d1 .. <name>-dn``:

- ``<name>-d1`` reads the user's events keyed by ``d1.on`` (through a repartition hop unless
  the events' record key already is it);
- ``<name>-di`` (i < n) writes ``<app id>-<name>-di-link`` (internal), each revision keyed by
  the next link's join key (its ``on`` fields) as the next dimension's topic writes its keys:
  the next link reads it as it is, ``id: "id"``, co-partitioned with its dimension, with no
  hop (a repartitioned next dimension: keyed by join id, and the next link re-keys it through a
  hop). Why: a hop costs a parse and a send per record; two fewer per order made the chain
  1.4× faster (docs/contributing/findings.md).
  A link carries the id, the user's ``events.copy``, every later ``on`` field, the event
  time, and each earlier dimension's copy, ``time_as``, ``previous_<copy>`` and cause (as
  ``<dim>_cause``);
- ``<name>-dn`` writes the spec's ``output``: one revision log per event carrying every
  dimension's answer. Its ``cause`` and ``previous_<field>`` are the last link's own; an earlier
  dimension's ``<dim>_cause`` and ``previous_<field>`` say why, and from what, that dimension's
  answer last changed.

Refused, naming the spec (why in :func:`expand`): finality and ``emit: final``, ``hold_ms``,
``tables``, ``ticks``, an events side without ``id`` or with a ``model``, an earlier dimension
with a ``model``, a link name or topic Kafka or a spec would refuse.

Pure: no Faust.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from app.inputs.paths import PathError, flat_name
from app.inputs.time_formats import KAFKA_TIMESTAMP
from app.inputs.wire_formats import REHOP_KEY_FORMATS
from app.joins.spec import JoinConfig, JoinSpec, SpecError

__all__ = ["MultiDimensionJoin", "expand", "expand_all", "is_multi", "link_topic", "standalone"]

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
_DIM_NAME = re.compile(r"^[a-z][a-z0-9]*$")
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
#: spec-level keys copied onto every link as they are
_SHARED = (
    "retention_ms",
    "window_ms",
    "late_dimensions",
    "review_lag_ms",
    "partitions",
    "start",
    "layout",
)
#: a dimension's keys that belong to the link, not to its dimension side
_LINK_KEYS = ("name", "on", "mode", "asof")
#: refused in a multi-dimension spec, and why
_REFUSED = {
    "finality": "the last link's promise cannot cover the corrections earlier links still make",
    "emit": "emit 'final' needs a promise the last link cannot give for earlier links",
    "hold_ms": "a hold per link is not yet tested across links; give each dimension's mode",
    "tables": "each link names its own tables (<name>-<dim>-joins ...)",
    "ticks": "each link has its own internal ticks topic (<app id>-<name>-<dim>-ticks)",
    "dimension": "give either 'dimension' (one) or 'dimensions' (several)",
}


def is_multi(raw: Any) -> bool:
    """Is ``raw`` a spec as written with ``dimensions``?"""
    return isinstance(raw, dict) and "dimensions" in raw


def link_topic(app_id: str, name: str, dim: str) -> str:
    """The internal topic link ``<name>-<dim>`` writes and the next link reads."""
    return f"{app_id}-{name}-{dim}-link"


def expand_all(
    raws: Sequence[dict[str, Any] | JoinConfig], app_id: str = "etj"
) -> tuple[list[dict[str, Any] | JoinConfig], set[str], dict[str, str]]:
    """Every spec, a multi-dimension one replaced by its links; the link topics (internal:
    :attr:`app.joins.spec.JoinSpec.internal_output`); and each link's dimension, by link name
    (:attr:`app.joins.spec.JoinSpec.dimension_name`)."""
    out: list[dict[str, Any] | JoinConfig] = []
    links: set[str] = set()
    labels: dict[str, str] = {}
    for i, raw in enumerate(raws):
        if is_multi(raw):
            assert isinstance(raw, dict)
            specs = expand(raw, i, app_id)
            links |= {s["output"] for s in specs[:-1]}
            labels |= {s["name"]: d["name"] for s, d in zip(specs, raw["dimensions"], strict=True)}
            out += specs
        else:
            out.append(raw)
    return out, links, labels


def _flat(where: str, entry: str | dict[str, str]) -> tuple[str, str]:
    """(path, flat name) of a ``copy`` entry (a path, or ``{path: name}``)."""
    if isinstance(entry, dict):
        ((path, name),) = entry.items()
        return path, name
    if entry == KAFKA_TIMESTAMP:
        return entry, "timestamp"
    try:
        return entry, flat_name(entry)
    except PathError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _key_flat(where: str, on: str | list[str]) -> str | list[str]:
    return [_flat(where, p)[1] for p in on] if isinstance(on, list) else _flat(where, on)[1]


def _type_of(where: str, side: str, fields: dict[str, str], path: str) -> str:
    if path == KAFKA_TIMESTAMP:
        return "time"
    if path not in fields:
        raise SpecError(f"{where}: {side}: {path!r} is not one of its fields")
    return fields[path]


def _optional(t: str) -> str:
    return t if t.endswith("?") else f"{t}?"


def expand(raw: dict[str, Any], index: int | None = None, app_id: str = "etj") -> list[dict]:
    """The links of the multi-dimension spec ``raw`` (module docstring), each a one-dimension
    spec as written; raises :class:`SpecError` naming the spec and why."""
    name = raw.get("name")
    where = f"join spec {name!r}" if name else f"join spec #{index}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise SpecError(f"{where}: name: lowercase letters, digits and '-', at most 40")
    for key, why in _REFUSED.items():
        if (
            key in raw
            and not (key == "emit" and raw[key] == "all")
            and raw[key] not in (None, False)
        ):
            raise SpecError(f"{where}: {key!r} with 'dimensions' is refused: {why}")
    known = {"name", "events", "dimensions", "output", "mode", "asof", "output_format", *_SHARED}
    extra = sorted(set(raw) - known - set(_REFUSED))
    if extra:
        raise SpecError(f"{where}: unknown field {extra[0]!r} (a spec with 'dimensions')")
    events = dict(raw.get("events") or {})
    dims = raw.get("dimensions")
    if not isinstance(dims, list) or not dims or not all(isinstance(d, dict) for d in dims):
        raise SpecError(f"{where}: dimensions: a list of one or more dimensions")
    if events.get("id") is None:
        raise SpecError(
            f"{where}: events.id is required with 'dimensions': the links between dimensions "
            "carry each event by its join id, and a new revision of it must be the same event"
        )
    if events.get("model") is not None or not isinstance(events.get("fields"), dict):
        raise SpecError(
            f"{where}: events: give 'fields' (not 'model') with 'dimensions': each link "
            "between dimensions declares the types of the fields it carries"
        )
    seen: set[str] = set()
    for i, d in enumerate(dims):
        dname = d.get("name")
        if not isinstance(dname, str) or not _DIM_NAME.match(dname) or dname in seen:
            raise SpecError(
                f"{where}: dimensions[{i}].name: a unique name of lowercase letters and digits "
                f"(got {dname!r}): it names the link <name>-<dim>, its tables and topics"
            )
        seen.add(dname)
        if "on" not in d:
            raise SpecError(
                f"{where}: dimension {dname!r}: 'on' is missing (the event's key for it)"
            )
        link_name = f"{name}-{dname}"
        if not _NAME.match(link_name):
            raise SpecError(
                f"{where}: dimension {dname!r}: the link's name {link_name!r} is over 40 "
                "characters (a spec's name limit): shorten the spec's or the dimension's name"
            )
        topic = link_topic(app_id, name, dname)
        if not _TOPIC_NAME.match(topic):
            raise SpecError(
                f"{where}: dimension {dname!r}: link topic {topic!r} is not a valid Kafka "
                "topic name: change ETJ_APP_ID or the names"
            )
        if i < len(dims) - 1 and not isinstance(d.get("fields"), dict):
            raise SpecError(
                f"{where}: dimension {dname!r}: give 'fields' (not 'model'): the next link "
                "declares the types of the answer it carries"
            )
    ev_fields: dict[str, str] = events["fields"]
    user_copy = [_flat(where, e) for e in events.get("copy", [])]
    named = [f for _, f in user_copy] + [
        f
        for d in dims
        for f in [d.get("time_as"), *(_flat(where, e)[1] for e in d.get("copy", []))]
    ]
    if "dimension" in named:
        raise SpecError(
            f"{where}: a copied field named 'dimension': with 'dimensions' the output's "
            "'dimension' names the dimension that changed; rename it in copy "
            '({"dimension": "name"})'
        )
    time_path = events.get("time")
    if not isinstance(time_path, str):
        raise SpecError(f"{where}: events.time: missing")
    time_flat = _flat(where, time_path)[1]

    def on_paths(d: dict[str, Any]) -> list[str]:
        return d["on"] if isinstance(d["on"], list) else [d["on"]]

    # (flat name, type) of each carried field, in the user's events' terms
    carried: dict[str, str] = {"id": "str"}
    for path, flat in user_copy:
        carried[flat] = _type_of(where, "events", ev_fields, path)
    answers: dict[str, str] = {}  # earlier dimensions' answer fields, flat name -> type
    causes: list[str] = []  # earlier dimensions' causes carried as <dim>_cause
    specs: list[dict[str, Any]] = []
    n = len(dims)
    for i, d in enumerate(dims):
        dname = d["name"]
        later_on = [p for later in dims[i + 1 :] for p in on_paths(later)]
        if i == 0:
            ev = dict(events)
            ev.pop("key", None)
            ev["key"] = d["on"]
            ev["repartition"] = bool(events.get("repartition")) or events.get("key") != d["on"]
            have = {f for _, f in user_copy}
            extra_paths = [
                p for p in [*later_on, time_path] if i < n - 1 and _flat(where, p)[1] not in have
            ]
            ev["copy"] = [*events.get("copy", []), *dict.fromkeys(extra_paths)]
            for p in extra_paths:
                carried.setdefault(_flat(where, p)[1], _type_of(where, "events", ev_fields, p))
        else:
            prev = dims[i - 1]["name"]
            own = [f for _, f in user_copy] + list(answers) + causes
            keep = [_flat(where, p)[1] for p in later_on] + [time_flat] if i < n - 1 else []
            copy: list[Any] = list(dict.fromkeys([*own, *keep]))
            copy.append({"cause": f"{prev}_cause"})  # the upstream link's own cause
            here = ["id", *(f for _, f in user_copy), time_flat]
            here += [_flat(where, p)[1] for later in dims[i:] for p in on_paths(later)]
            fields = {f: carried[f] for f in dict.fromkeys(here)}
            fields.update({**answers, **dict.fromkeys(causes, "str"), "cause": "str"})
            fields["dimension"] = "str?"  # which dimension changed upstream (none: the event)
            copy.append("dimension")
            causes = [*causes, f"{prev}_cause"]
            direct = _direct_key_format(d)
            ev = {
                "topic": specs[-1]["output"],
                "key": _key_flat(where, d["on"]),
                "time": time_flat,
                "id": "id",
                "repartition": direct is None,
                **({"key_format": direct} if direct else {}),
                "fields": fields,
                "copy": copy,
            }
        side = {k: v for k, v in d.items() if k not in _LINK_KEYS}
        spec: dict[str, Any] = {
            "name": f"{name}-{dname}",
            "events": ev,
            "dimension": side,
            "output": raw["output"] if i == n - 1 else link_topic(app_id, name, dname),
            "ticks": f"{app_id}-{name}-{dname}-ticks",
            "mode": d.get("mode", raw.get("mode", "left")),
            "asof": d.get("asof", raw.get("asof", "before")),
            **{k: raw[k] for k in _SHARED if k in raw},
        }
        if i == n - 1 and "output_format" in raw:
            spec["output_format"] = raw["output_format"]
        specs.append(spec)
        if i < n - 1:
            answers.update(_answer_fields(where, d))
    return specs


def _direct_key_format(d: dict[str, Any]) -> str | None:
    """How the link before dimension ``d`` writes its link topic's keys so that ``d``'s link
    reads that topic as it is, with no repartition hop: as ``d``'s topic writes its keys
    (Kafka partitions by key bytes, so the two are co-partitioned), when those are text or
    Kafka's Long or Integer and ``d`` is read as it is. None: through a hop (a dimension keyed
    in Avro, or itself repartitioned)."""
    fmt = d.get("key_format", "str")
    composite = isinstance(d.get("key"), list)
    if d.get("repartition") or fmt not in REHOP_KEY_FORMATS or (composite and fmt != "str"):
        return None
    return str(fmt)


def _answer_fields(where: str, d: dict[str, Any]) -> dict[str, str]:
    """The fields a link adds for its dimension, carried to the next link (flat name -> type):
    its copy, ``time_as`` and ``previous_<copy>``, all optional: null is no version in ``left``
    mode, and an ``inner`` link's retraction (an end took its answer: docs/joins/
    declarative.md#tombstones-deletes) in ``inner`` mode, which the next link must read and
    pass on, not dead-letter; previous always (a first answer has none). Its cause is carried
    apart."""
    fields: dict[str, str] = d["fields"]
    out: dict[str, str] = {}
    for entry in d.get("copy", []):
        path, flat = _flat(where, entry)
        t = _type_of(where, f"dimension {d['name']!r}", fields, path)
        out[flat] = _optional(t)
        out[f"previous_{flat}"] = _optional(t)
    if isinstance(d.get("time_as"), str):
        out[d["time_as"]] = "time?"
    return out


# --- the batch twin's view of a spec -------------------------------------------------------


def standalone(
    raw: dict[str, Any], index: int | None = None, app_id: str = "etj"
) -> list[tuple[str, dict[str, Any]]]:
    """(dimension name, a one-dimension spec as written) for each dimension of ``raw``: the
    dimension joined to the user's events directly (keyed by its ``on``), writing the spec's
    output. Raises :class:`SpecError` as :func:`expand` does.

    Why the batch twin answers each dimension on its own: a link's answer depends only on the
    event's key for its dimension and the event's time, which every link carries unchanged,
    so the chain's last answer for an event is each dimension's as-of answer at the event's
    time, combined by id (an ``inner`` dimension without one: no join). Computing them apart
    is then the exact answer, and one that does not share the chain's code."""
    expand(raw, index, app_id)  # every refusal, as the worker gives it
    return [
        (d["name"], expand({**raw, "dimensions": [d]}, index, app_id)[0]) for d in raw["dimensions"]
    ]


@dataclass(frozen=True)
class MultiDimensionJoin:
    """A spec with several dimensions, resolved for the batch twin: the last link (whose
    output fields are the spec's output) and each dimension as its own one-dimension join
    (:func:`standalone`)."""

    name: str
    last: JoinSpec
    dimensions: tuple[tuple[str, JoinSpec], ...]

    @property
    def output(self) -> str:
        return self.last.output

    def answer_of(self, dim: str) -> tuple[str, ...]:
        """The output fields that carry dimension ``dim``'s answer: its copy and ``time_as``."""
        spec = dict(self.dimensions)[dim]
        return (*spec.dimension.copy, spec.time_as)

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """The exact answer's columns: the id, the events' copy, each dimension's answer."""
        first = self.dimensions[0][1]
        cols = (
            "id",
            *first.events.copy,
            *(f for d, _ in self.dimensions for f in self.answer_of(d)),
        )
        missing = [c for c in cols if c not in self.last.output_fields]
        assert not missing, f"{self.name}: the output lacks {missing}"
        return cols

    @property
    def inner(self) -> tuple[str, ...]:
        """The dimensions whose missing answer means no join (``mode`` inner)."""
        return tuple(d for d, spec in self.dimensions if spec.mode == "inner")

"""Joins that feed joins: a join whose events are another join's revision log, in one worker
(docs/joins/declarative.md#joins-that-feed-joins).

The upstream's output is keyed by join id and carries, per revision, the upstream event's
copied fields, the answer, ``revision`` and ``cause``; the downstream reads it as any events
topic (through a repartition hop when it joins on another field), with ``events.id`` the
upstream's ``id``, so a new upstream revision is the same event again, and the engine's rule
for an event re-using its id revises the downstream join only when its answer changes.

What a chain adds to a spec, and why:

- **the order of an id's revisions** (:func:`ordered_config`, :attr:`JoinSpec.order_field`):
  the downstream reads the upstream's ``revision`` and ignores a revision numbered lower than
  the one it holds. Why: the log of one id is not in revision order after a crash (the
  upstream re-sends superseded revisions not known delivered, :attr:`Join.unsent
  <app.logic.event_join.Join.unsent>`; the hop re-sends what it passed on), and the last
  record per id is then an older answer; read in log order, the downstream would end on it.
- **a stable key**: a downstream key must be a field a revision of one id always carries the
  same: the upstream's ``id`` or one of its events fields; not an answer field (a new answer
  would key the same id elsewhere: two joins of one id, one never revised again).
- **refusals** (:func:`check_links`), each naming the spec: a revision log read as a
  dimension, a downstream without ``events.id: "id"``, a field the revisions do not carry, a
  header or the Kafka timestamp (a revision has no headers, and its timestamp is when it was
  sent), a format other than the upstream's ``output_format``, a retention shorter than the
  upstream's (a correction the upstream still makes would be late downstream), and a loop
  (:func:`refuse_loops`: a revision would feed itself for ever).

Pure: no Faust; :func:`app.joins.resolve.resolve_all` calls it.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.inputs.paths import split_path
from app.joins.spec import JoinConfig, JoinSpec, SpecError

__all__ = ["ORDER_PATH", "check_link", "check_links", "fed_by", "ordered_config", "refuse_loops"]

#: the field of a revision that numbers an id's revisions (docs/concepts/revision-log.md)
ORDER_PATH = "revision"
#: the fields the engine adds to every revision (app.agents.event_join; resolve's
#: RESERVED_OUTPUT_FIELDS, repeated here so that this module imports no resolver)
_ENGINE_FIELDS = ("partition", "source")


def fed_by(cfgs: Sequence[JoinConfig]) -> dict[int, int]:
    """Downstream index -> upstream index: each spec whose events topic is another's output."""
    outputs = {c.output: i for i, c in enumerate(cfgs)}
    return {
        i: outputs[c.events.topic]
        for i, c in enumerate(cfgs)
        if c.events.topic in outputs and outputs[c.events.topic] != i
    }


def ordered_config(cfg: JoinConfig) -> JoinConfig:
    """A downstream spec as written, reading the revisions' ``revision`` too (declared
    ``int`` when its ``fields`` do not name it; a ``model`` must have it)."""
    fields = cfg.events.fields
    if fields is None or ORDER_PATH in fields:
        return cfg
    events = cfg.events.model_copy(update={"fields": {**fields, ORDER_PATH: "int"}})
    return cfg.model_copy(update={"events": events})


def refuse_loops(specs: Sequence[JoinSpec]) -> None:
    """Refuse specs whose outputs feed each other round (a → b → a): each revision would make
    another, for ever. The message names the loop."""
    readers: dict[str, list[JoinSpec]] = {}
    for s in specs:
        for topic in {s.events.topic, s.dimension.topic}:
            readers.setdefault(topic, []).append(s)
    done: set[str] = set()

    def visit(s: JoinSpec, path: list[str]) -> None:
        if s.name in path:
            loop = [*path[path.index(s.name) :], s.name]
            raise SpecError(
                "join specs " + " -> ".join(repr(n) for n in loop) + " form a loop: each "
                "reads the output of the one before it, so a revision would feed itself for "
                "ever; break the loop"
            )
        if s.name in done:
            return
        for r in readers.get(s.output, ()):
            visit(r, [*path, s.name])
        done.add(s.name)

    for s in specs:
        visit(s, [])


def check_links(specs: Sequence[JoinSpec]) -> None:
    """Refuse a loop, a revision log read as a dimension, and each downstream spec that cannot
    read its upstream's revisions (:func:`check_link`)."""
    refuse_loops(specs)
    by_output = {s.output: s for s in specs}
    for down in specs:
        up = by_output.get(down.dimension.topic)
        if up is not None:
            raise SpecError(
                f"join spec {down.name!r}: dimension.topic {up.output} is the output of join "
                f"{up.name!r}: a revision log is read as a join's events, not as its "
                "dimension (versions are ordered by time, revisions of one id by number)"
            )
        up = by_output.get(down.events.topic)
        if up is not None and up is not down:
            check_link(up, down)


def _top(path: str) -> str | None:
    """The top-level field a path reads (None: a header or the Kafka timestamp)."""
    return None if path.startswith("$") else split_path(path)[0]


def check_link(up: JoinSpec, down: JoinSpec) -> None:
    """Refuse a downstream spec that cannot read its upstream's revisions (module docstring)."""
    where = f"join spec {down.name!r}"
    ev = down.events
    if down.id_field is None or ev.path_of(down.id_field) != "id":
        raise SpecError(
            f"{where}: events.id must be 'id' (the join id of {up.name!r}, whose output it "
            "reads): a new revision of a join is then the same event again, and revises it"
        )
    wire = {*up.output_fields, *_ENGINE_FIELDS}
    for flat in ev.field_names:
        path = ev.path_of(flat)
        top = _top(path)
        if top is None:
            raise SpecError(
                f"{where}: events field {path!r}: a revision of {up.name!r} has no headers, "
                "and its Kafka timestamp is when it was sent; read a field of the revision"
            )
        if top not in wire:
            raise SpecError(
                f"{where}: events field {path!r}: a revision of {up.name!r} has no field "
                f"{top!r} (it has {', '.join(sorted(wire))})"
            )
    stable = {"id", *up.events.copy}
    for flat in ev.key_parts:
        path = ev.path_of(flat)
        if _top(path) not in stable:
            raise SpecError(
                f"{where}: events.key {path!r} is not a field every revision of one join of "
                f"{up.name!r} carries alike (its id, or an events field it copies: "
                f"{', '.join(sorted(stable))}): a new answer would key the same join "
                "elsewhere"
            )
    keyed = up.output_key is not None and up.output_key[0] == ev.key_parts
    if not ev.repartition and ev.path_of(ev.key) != "id" and not keyed:
        raise SpecError(
            f"{where}: the output of {up.name!r} is keyed by join id: give events.repartition "
            "true (or key 'id')"
        )
    if ev.format != up.output_format:
        raise SpecError(
            f"{where}: events.format {ev.format!r}, but join {up.name!r} writes its output "
            f"as {up.output_format!r}"
        )
    if down.retention_ms < up.retention_ms:
        raise SpecError(
            f"{where}: retention_ms {down.retention_ms} is shorter than that of {up.name!r} "
            f"({up.retention_ms}), whose output it reads: a correction {up.name!r} still "
            "makes would be late here"
        )

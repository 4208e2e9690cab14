"""A join spec's fingerprint: the keys that shape its state rows, kept in the join's clock table
beside each partition's stream time, and what a change of them does to the state already there
(docs/operating/runbook.md#change-a-spec).

Why: a join's rows are positional (a version ``[event_time, *dimension copies]``, a join
``[event_time, *event payload, *answer, answer_time, revision, cause, *previous, …]``:
:mod:`app.joins.state`) and nothing said which spec wrote them, so a worker started with another
``copy``, ``asof``, ``mode`` or retention on the same app id read the old rows as if its own
spec had written them: answers shifted by a column, or joined by another rule, silently.

**What is kept** (:func:`fingerprint`): per side, the topic the join reads (its offsets are the
sources kept in the rows: :attr:`app.logic.event_join.Join.source`), the key path and the
format of the record keys it reads (the partition a key's rows are in is Kafka's partitioner's
over those bytes) and the key's kinds (``str``, ``int``, a composite key's parts: an ``int`` or
composite key's copies sit in the join rows' payload), the value format, the time path and format (the rows' event times), the
copied paths in order with their types
(the rows' columns: two types in one column break the tie rule's comparisons); the events'
``id`` (the join ids in the rows' keys: without one, the id is a digest of the copied values)
and the field that numbers an id's events (a join fed by another: the last payload slot);
the ticks topic (its offsets are sources too), the partition count, ``mode``, ``asof``, the
retention, the emit window, ``hold_ms``, ``late_dimensions``, ``review_lag_ms``, finality and
``emit``. Not kept: what only the output or the start says (``time_as``, the names a copy
renames a field to, ``output``, ``start``, ``layout``), the table names (other tables are other
state: see the runbook).

**A change is compatible** (:func:`changes`, :data:`COMPATIBLE`) when the rows written before
read right under the new spec and nothing it promises is broken by them:

- ``events.copy``: a new order or a new field only where the event payload slots (the copied
  paths but the key and the time) and their types stay as they are, and the join ids with
  them: the events have an ``id``, or the copy is unchanged (the derived id digests it). A new
  field copied at the end is *not* compatible: the payload sits in the middle of a join row;
- ``retention_ms``: shorter (the next revisit purges what is now behind the horizon), or longer:
  then records older than the horizon of the moment of the change stay late (``late_before``,
  kept with the fingerprint) until the new horizon passes it, since the old retention purged
  the joins and versions they would need;
- ``window_ms``, ``late_dimensions``, ``review_lag_ms``: any change (each is judged per record
  as it comes; the state does not depend on it);
- a side's ``format`` (JSON, or a Schema Registry's): the rows hold the values decoded (their
  types are compared with the copy); not its ``key_format``, which moves keys to other
  partitions;
- ``hold_ms``: a new one or another value (held joins are released by the bound in force); not
  its removal (a held join would never be answered);
- ``finality``: turned on (the promises start from the stored clock); not turned off (the
  promises already published stay on ``<output>-final``, and a worker without finality no longer
  keeps them).

Every other change is incompatible. A stored fingerprint that lacks a key (written by an older
etj) compares as unchanged on it; a key the running etj does not know is not compared.

Pure: no Faust, no clock. :class:`SpecGuard` is what a join's rows call at the first read of a
partition's clock in a batch (:meth:`app.joins.join_rows.JoinRows.stream_time`).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.joins.spec import JoinSpec, Side, SpecError

__all__ = [
    "COMPATIBLE",
    "Change",
    "SpecChangeError",
    "SpecGuard",
    "changes",
    "fingerprint",
    "refusal",
    "spec_row_key",
]

#: the version of the fingerprint's shape (a key added later compares as unchanged when absent)
VERSION = 1


class SpecChangeError(SpecError):
    """A partition's state was written by a spec the running one cannot read it as."""


def spec_row_key(partition: int) -> str:
    """The clock table's key of a partition's fingerprint row (``final:<p>`` is its promise)."""
    return f"spec:{partition}"


def _type_name(side: Side, flat: str) -> str:
    """A copied field's type as the rows hold it: ``str``, ``int``, ``float``, ``bool``,
    ``?`` when optional (a ``time`` is an ``int``)."""
    info = side.model.model_fields.get(flat)
    if info is None:
        return "?"
    ann = info.annotation
    args = typing.get_args(ann)
    base = [a for a in args if a is not type(None)] if args else [ann]
    name = "|".join(getattr(b, "__name__", str(b)) for b in base)
    return name + ("?" if args and type(None) in args else "")


def _side(side: Side) -> dict[str, Any]:
    copy = [side.path_of(f) for f in side.copy]
    return {
        "input": side.input,
        "key": side.path_of(side.key),
        # str, int, or a composite key's parts: an int or composite key is in the payload
        "key_kinds": list(side.key_kinds),
        "key_format": side.input_key_format,
        "format": side.format,
        "time": side.path_of(side.time),
        "time_format": side.time_format,
        "copy": copy,
        "copy_types": {side.path_of(f): _type_name(side, f) for f in side.copy},
    }


def fingerprint(spec: JoinSpec, partitions: int) -> dict[str, Any]:
    """The state-shaping keys of an event-time spec (module docstring), as flat JSON:
    ``{"events.copy": [...], "mode": "left", ...}``; ``partitions``: its partition count
    (the spec's, else ``ETJ_PARTITIONS``)."""
    out: dict[str, Any] = {"version": VERSION}
    for name, side in (("events", spec.events), ("dimension", spec.dimension)):
        out.update({f"{name}.{k}": v for k, v in _side(side).items()})
    out.update(
        {
            "events.id": spec.events.path_of(spec.id_field) if spec.id_field else None,
            "ticks": spec.ticks,
            "partitions": partitions,
            "mode": spec.mode,
            "asof": spec.asof,
            "retention_ms": spec.retention_ms,
            "window_ms": spec.window_ms,
            "hold_ms": spec.hold_ms,
            "late_dimensions": spec.late_dimensions,
            "review_lag_ms": spec.review_lag_ms,
            "finality": spec.final_topic is not None,
            "emit": spec.emit,
        }
    )
    if spec.order_field:  # a join fed by another: the upstream revision, a payload slot
        out["events.order"] = spec.events.path_of(spec.order_field)
    return out


# --- what a change does -----------------------------------------------------------------------


def _payload(fp: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The event payload slots of a join row: the copied paths but the key (a ``str`` key; an
    ``int`` or composite key's copies are in the payload) and the time, in order, with their
    types."""
    text_key = fp.get("events.key_kinds") in (None, ["str"])  # None: before int keys
    skip = (fp.get("events.key") if text_key else None, fp.get("events.time"))
    types = fp.get("events.copy_types") or {}
    return [(p, types.get(p, "?")) for p in fp.get("events.copy") or () if p not in skip]


def _events_copy(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    if _payload(old) != _payload(new):
        return False  # the join rows' payload columns would move or change type
    derived = new.get("events.id") is None  # the join id digests the copied values in order
    return not derived or old.get("events.copy") == new.get("events.copy")


def _hold(old: Any, new: Any) -> bool:
    return new is not None  # added or changed: fine; removed: held joins never answered


def _finality(old: Any, new: Any) -> bool:
    return bool(new) or not old  # on, or still off


def _same_types(old: Any, new: Any) -> bool:
    """Do two ``copy_types`` agree on every path both have?"""
    return all(old[p] == new[p] for p in old.keys() & new.keys())


#: key -> (old value, new value) -> is the change compatible (keys not here: never)
COMPATIBLE: dict[str, Callable[[Any, Any], bool]] = {
    # the rows hold the decoded values (their types compared with the copy)
    "events.format": lambda old, new: True,
    "dimension.format": lambda old, new: True,
    "retention_ms": lambda old, new: True,  # longer: with ``late_before`` (module docstring)
    "window_ms": lambda old, new: True,
    "late_dimensions": lambda old, new: True,
    "review_lag_ms": lambda old, new: True,
    "hold_ms": _hold,
    "finality": _finality,
}

#: keys whose compatibility depends on others (the whole fingerprints are compared)
_WHOLE: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], bool]] = {
    "events.copy": _events_copy,
    # the types of the copied fields: compared with the copy (a payload slot, a dimension
    # column); for the events, a type of a field that is no payload slot is free
    "events.copy_types": _events_copy,
}


@dataclass(frozen=True)
class Change:
    """One key of the fingerprint that differs: its old and new values, and whether the state
    already written reads right under the new one."""

    key: str
    old: Any
    new: Any
    compatible: bool

    def __str__(self) -> str:
        return f"{self.key}: {_shown(self.old)} -> {_shown(self.new)}"


def _shown(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def changes(stored: Mapping[str, Any], mine: Mapping[str, Any]) -> list[Change]:
    """The keys of ``mine`` that differ from ``stored`` (a key ``stored`` lacks, or ``mine``
    does not know, is not compared), each judged compatible or not (module docstring)."""
    out = []
    for key, new in mine.items():
        if key == "version" or key not in stored or stored[key] == new:
            continue
        old = stored[key]
        if key.endswith(".copy_types") and _same_types(old, new):
            continue  # only fields copied or no more: the copy's change says it
        if key in _WHOLE:
            ok = _WHOLE[key](stored, mine)
        else:
            rule = COMPATIBLE.get(key)
            ok = rule is not None and rule(old, new)
        out.append(Change(key, old, new, ok))
    return out


def refusal(join: str, partition: int, found: list[Change]) -> str:
    """The one line a worker that refuses a partition's state says: the spec, what changed, and
    the two ways forward."""
    what = "; ".join(str(c) for c in found if not c.compatible)
    return (
        f"etj refuses to run join {join!r}: partition {partition}'s state was written by "
        f"another spec, and this change cannot read it: {what}. Either run the new spec under "
        'a new ETJ_APP_ID with "start" (blue/green), or rebuild this app id\'s state from its '
        "inputs (docs/operating/runbook.md#change-a-spec); or restore the spec that wrote it"
    )


# --- the check, per partition -----------------------------------------------------------------


class SpecGuard:
    """What a join's rows call at the first read of a partition's clock in a batch: the
    partition's stored fingerprint row against this spec's. A state without one, or written by
    a compatible spec, gets this spec's; an incompatible one is refused through
    ``on_refusal`` (the worker: :func:`app.runtime.refuse`, which ends the process; the error
    is raised if it returns)."""

    def __init__(
        self,
        spec: JoinSpec,
        partitions: int,
        on_refusal: Callable[[str], Any] | None = None,
        on_change: Callable[[str], Any] | None = None,
    ) -> None:
        self.join = spec.name
        self.fingerprint = fingerprint(spec, partitions)
        self.on_refusal = on_refusal
        #: told of a compatible change, once per partition that gets the new fingerprint
        self.on_change = on_change

    def check(
        self, partition: int, row: Any, clock: int | None
    ) -> tuple[dict[str, Any] | None, int | None]:
        """``row``: the partition's stored fingerprint row (None: none); ``clock``: its stored
        stream time. (The row to write, None when the stored one is this spec's; the event
        time records before which stay late, None: none.)"""
        mine = self.fingerprint
        if row is not None and row.get("spec") == mine:
            return None, row.get("late_before")
        if row is None:
            return {"spec": mine, "late_before": None}, None
        stored = row.get("spec") or {}
        found = changes(stored, mine)
        if any(not c.compatible for c in found):
            line = refusal(self.join, partition, found)
            if self.on_refusal is not None:
                self.on_refusal(line)
            raise SpecChangeError(line)
        late_before = row.get("late_before")
        old_retention = stored.get("retention_ms")
        if (
            clock is not None
            and isinstance(old_retention, int)
            and mine["retention_ms"] > old_retention
        ):
            # a longer retention: what the old one purged stays late until the new horizon
            # passes the old one's of this moment
            floor = clock - old_retention
            late_before = floor if late_before is None else max(late_before, floor)
        if found and self.on_change is not None:
            self.on_change(
                f"join {self.join!r}: partition {partition}'s state was written by another "
                f"spec, which this one reads right: {'; '.join(str(c) for c in found)}"
                + ("" if late_before is None else f"; records before {late_before} stay late")
            )
        return {"spec": mine, "late_before": late_before}, late_before

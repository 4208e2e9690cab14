"""The one independent oracle: the exact answer of an event-time join, by brute force.

Every test that checks a join's answer (stream, agent, broker, batch twin) and every benchmark
that counts exact answers compares against this module. It shares no code with the engine
(:mod:`app.logic.event_join`, :mod:`app.joins`) nor with the batch twin (:mod:`app.batch`): it
re-derives the rules from their statement in the docs, quadratically, so a bug in the engine's
bisects, tie rule, purge or id derivation cannot hide in both. Change it only when a rule
changes.

The rules (docs: Concepts → event time; Joins):
- ``before``: an event at ``t`` joins the version of its key with the greatest event time
  strictly less than ``t``; ties on that time go to the greatest copied values; none → null.
- ``at-or-before-else-earliest``: the greatest event time at or before ``t``; an event before
  every version takes the earliest one (ties: the greatest values).
- mode ``inner``: an event no version applies to has no answer (absent).
- an *end* (a tombstone on the dimension topic, at its Kafka timestamp), given as the version
  ``[t]`` with no values, is a version like any other (the rules above pick it, and at one time a
  version with values is greater), but an event that picks it has no answer: null (``left``),
  absent (``inner``; a consumer reads an ``inner`` revision with a null answer as the id's
  retraction: :func:`answered`).
- the join id is the event's own id, else ``"r-" + sha1(key, event_time, recommendation)``
  (fields joined by U+001F, first 20 hex digits); for any spec, of the event's copied fields
  in ``events.copy`` order, each as Python's ``str()`` (``None``, ``True``, ``4.0``).
- the car join (docs: Joins → car × zone): a car is in the zone of its greatest arrival by
  (event_time, to_zone_id, fuel_level) and takes that zone's greatest reading by (event_time,
  pollution_level); a consumer keeps, per car, its greatest output by (car_event_time, zone_id,
  fuel_level, then the reading, none below any).

Each join also has its answer over records *as sent* (``(kind, key, wire value)``, the shape of
``sample-traffic`` and of every broker test): :func:`exact_mood_answer`,
:func:`exact_car_answer`, :func:`exact_movie_answer`, which the broker tests and the chaos run
compare the outputs with. They only read the records into the rules above (the movies one
through the spec's own record parsing: which fields a rating copies is the spec's, the rule is
this module's).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.commands.sample_traffic import Record
from app.logic.car_join import CarPollution  # the output record's type only
from tests.harness import latest_by_id

#: what a consumer compares in a mood revision (everything but the bookkeeping fields)
MOOD_ANSWER_FIELDS = ("id", "consultant", "event_time", "recommendation", "mood", "mood_event_time")


def join_id(consultant: str, event_time: int, recommendation: str, given: str | None) -> str:
    """The recommendation's own id, else the digest a replay (or the batch twin) derives."""
    if given:
        return given
    raw = "\x1f".join((consultant, str(event_time), recommendation)).encode("utf-8")
    return "r-" + hashlib.sha1(raw).hexdigest()[:20]


def spec_join_id(copied: Iterable[Any], given: str | None) -> str:
    """Any spec: the event's own id when non-empty, else the digest of its copied fields."""
    if given:
        return given
    raw = "\x1f".join(str(v) for v in copied).encode("utf-8")
    return "r-" + hashlib.sha1(raw).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Mood:
    """``etj-moods``: consultant ``name`` is in ``mood`` from ``event_time`` on."""

    name: str
    mood: str
    event_time: int

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "mood": self.mood, "event_time": self.event_time}


@dataclass(frozen=True, slots=True)
class Recommendation:
    """``etj-events``: a recommendation to a consultant at ``event_time``."""

    consultant: str
    recommendation: str
    event_time: int
    id: str | None = None

    @property
    def join_id(self) -> str:
        return join_id(self.consultant, self.event_time, self.recommendation, self.id)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "consultant": self.consultant,
            "recommendation": self.recommendation,
            "event_time": self.event_time,
        }
        if self.id is not None:
            out["id"] = self.id
        return out


def mood_answer(revision: dict[str, Any]) -> tuple[Any, ...]:
    """The comparable part of one mood revision as it is on the wire."""
    return tuple(revision[f] for f in MOOD_ANSWER_FIELDS)


def exact_mood_joins(
    moods: Iterable[Mood],
    recs: Iterable[Recommendation],
    ends: Iterable[tuple[str, int]] = (),
) -> dict[str, tuple[Any, ...]]:
    """join id -> (id, consultant, event_time, recommendation, mood, mood_event_time).

    Whatever the arrival order: only the set of records counts (a duplicate changes nothing).
    ``ends``: (consultant, time) of tombstones: the consultant's mood ends then (a mood at the
    same time is greater; a recommendation that picks an end has none).
    """
    by_name: dict[str, set[tuple[int, int, str]]] = {}
    for m in moods:
        by_name.setdefault(m.name, set()).add((m.event_time, 1, m.mood))
    for name, t in ends:
        by_name.setdefault(name, set()).add((t, 0, ""))
    out: dict[str, tuple[Any, ...]] = {}
    for r in recs:
        before = [p for p in by_name.get(r.consultant, ()) if p[0] < r.event_time]
        best = max(before) if before else None
        mood, at = (None, None) if best is None or not best[1] else (best[2], best[0])
        out[r.join_id] = (r.join_id, r.consultant, r.event_time, r.recommendation, mood, at)
    return out


def exact_mood_answer(records: Iterable[Record]) -> dict[str, tuple[Any, ...]]:
    """The mood join over records as sent (kinds ``mood`` and ``event``, valid ones; and
    ``tombstone``, a consultant's tombstone on the moods topic, its value its Kafka timestamp):
    :func:`exact_mood_joins`."""
    records = list(records)
    moods = [Mood(v["name"], v["mood"], v["event_time"]) for k, _, v in records if k == "mood"]
    recs = [
        Recommendation(v["consultant"], v["recommendation"], v["event_time"], v.get("id"))
        for k, _, v in records
        if k == "event"
    ]
    ends = [(key, v) for k, key, v in records if k == "tombstone"]
    return exact_mood_joins(moods, recs, ends)


@dataclass(frozen=True, slots=True)
class Event:
    """An event of any spec as :func:`exact_answer` reads it (its join id already chosen)."""

    key: str
    id: str
    event_time: int
    payload: tuple[Any, ...] = ()


def exact_answer(
    rules: Any, versions: Iterable[tuple[str, list[Any]]], events: Iterable[Any]
) -> dict[str, tuple[Any, ...]]:
    """Any spec: join id -> (id, key, event_time, payload, answer values, answer time).

    ``rules``: anything with ``asof`` and ``mode`` (a spec's rules); ``versions``: (key,
    [event_time, *copied values]); ``events``: anything with ``key``, ``id``, ``event_time`` and
    ``payload``. In inner mode an event no version applies to is absent.
    """
    by_key: dict[str, list[list[Any]]] = {}
    for key, v in versions:
        known = by_key.setdefault(key, [])
        if list(v) not in known:
            known.append(list(v))
    out: dict[str, tuple[Any, ...]] = {}
    for e in events:
        history = by_key.get(e.key, [])
        if rules.asof == "before":
            cands = [v for v in history if v[0] < e.event_time]
        elif rules.asof == "at-or-before-else-earliest":
            cands = [v for v in history if v[0] <= e.event_time]
            if not cands and history:
                first = min(v[0] for v in history)
                cands = [v for v in history if v[0] == first]
        else:
            raise ValueError(f"unknown as-of rule {rules.asof!r}")
        best = max(cands) if cands else None
        if best is not None and len(best) == 1:  # an end: no value known from its time
            best = None
        if best is None and rules.mode == "inner":
            out.pop(e.id, None)
            continue
        out[e.id] = (
            e.id,
            e.key,
            e.event_time,
            tuple(e.payload),
            None if best is None else tuple(best[1:]),
            None if best is None else best[0],
        )
    return out


def answered(latest: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    """What a consumer of an ``inner`` join keeps of ``latest`` (join id -> the result of its
    latest revision, in :func:`exact_answer`'s shape): the ids with an answer (a null answer
    is a retraction: an end took it after it was emitted)."""
    return {jid: r for jid, r in latest.items() if r[4] is not None}


# --- the movies join (app/joins/catalog.py: a spec) --------------------------------------------

#: what a consumer compares in a rated-movie revision (everything but the bookkeeping fields)
MOVIE_ANSWER_FIELDS = (
    "id",
    "movie_id",
    "user_id",
    "rating",
    "event_time",
    "title",
    "movie_event_time",
)


def exact_movie_answer(records: Iterable[Record]) -> dict[str, dict[str, Any]]:
    """The movies join over records as sent (kinds ``movie`` and ``rating``): the wire record
    it must end on per rating id (latest revision, fields as sent), by :func:`exact_answer`."""
    from app.inputs.records import parse
    from app.joins.catalog import movie_spec
    from app.joins.resolve import resolve
    from app.settings import Settings

    spec = resolve(movie_spec(Settings()))
    versions, events = [], []
    for kind, key, value in records:
        raw = json.dumps(value).encode()
        if kind == "movie":
            versions.append((key, spec.version_of(parse(spec.dimension.model, key.encode(), raw))))
        else:
            events.append(spec.event_of(parse(spec.events.model, key.encode(), raw)))
    out = {}
    for jid, (_, key, t, (user, stars), answer, answer_time) in exact_answer(
        spec.rules, versions, events
    ).items():
        out[jid] = {
            "id": jid,
            "movie_id": key,
            "user_id": user,
            "rating": stars,
            "event_time": t,
            "title": answer[0],
            "movie_event_time": answer_time,
        }
    return out


def movie_answers(revisions: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a consumer of the rated movies keeps (the latest revision per rating id), in the
    shape of :func:`exact_movie_answer`."""
    return {
        jid: {k: r[k] for k in MOVIE_ANSWER_FIELDS} for jid, r in latest_by_id(revisions).items()
    }


# --- the car join (docs/joins/car-zone.md) ----------------------------------------------------

#: what a consumer compares in a car output: every field of ``etj-car-pollution``
CAR_ANSWER_FIELDS = (
    "car_id",
    "zone_id",
    "fuel_level",
    "pollution_level",
    "car_event_time",
    "zone_event_time",
)


def car_answer(output: dict[str, Any]) -> tuple[Any, ...]:
    """The comparable part of one car output as it is on the wire."""
    return tuple(output[f] for f in CAR_ANSWER_FIELDS)


def exact_car_view(
    arrivals: Iterable[dict[str, Any]],
    readings: Iterable[dict[str, Any]],
) -> dict[int, tuple[Any, ...]]:
    """car id -> its exact output, from wire values of ``etj-car-arrivals`` and ``etj-zones``.

    A car is in the ``to_zone_id`` of its greatest arrival by (event_time, to_zone_id,
    fuel_level), with that arrival's fuel level; it takes its zone's greatest reading by
    (event_time, pollution_level), or none (null pollution). Arrival order does not count.
    """
    arrivals, readings = list(arrivals), list(readings)
    out: dict[int, tuple[Any, ...]] = {}
    for car in {a["car_id"] for a in arrivals}:
        a = max(
            (x for x in arrivals if x["car_id"] == car),
            key=lambda x: (x["event_time"], x["to_zone_id"], x["fuel_level"]),
        )
        zone = [r for r in readings if r["zone_id"] == a["to_zone_id"]]
        r = max(zone, key=lambda x: (x["event_time"], x["pollution_level"])) if zone else None
        out[car] = (
            car,
            a["to_zone_id"],
            a["fuel_level"],
            None if r is None else r["pollution_level"],
            a["event_time"],
            None if r is None else r["event_time"],
        )
    return out


def newest_car_outputs(outputs: Iterable[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """The consumer rule of ``etj-car-pollution``: per car, the output with the greatest
    (car_event_time, zone_id, fuel_level, zone_event_time, pollution_level), an output with no
    reading below any with one."""

    def order(o: dict[str, Any]) -> tuple[Any, ...]:
        reading = (
            (0, 0, 0.0)
            if o["zone_event_time"] is None or o["pollution_level"] is None
            else (1, o["zone_event_time"], o["pollution_level"])
        )
        return (o["car_event_time"], o["zone_id"], o["fuel_level"], *reading)

    best: dict[int, dict[str, Any]] = {}
    for o in outputs:
        if o["car_id"] not in best or order(o) >= order(best[o["car_id"]]):
            best[o["car_id"]] = o
    return {car: car_answer(o) for car, o in best.items()}


def exact_car_answer(records: Iterable[Record]) -> dict[int, CarPollution]:
    """The car join over records as sent (kinds ``car`` and ``zone``): car id -> the output a
    consumer must end on (:func:`exact_car_view`), as the record it reads back."""
    records = list(records)
    view = exact_car_view(
        [v for k, _, v in records if k == "car"], [v for k, _, v in records if k == "zone"]
    )
    return {
        car: CarPollution.from_wire(dict(zip(CAR_ANSWER_FIELDS, answer)))
        for car, answer in view.items()
    }

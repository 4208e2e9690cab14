"""The joins this worker runs: the built-in specs ``ETJ_BUILTIN_JOINS`` names, and those of
``ETJ_JOINS_FILE``.

The built-ins are written as the same plain data a user puts in the JSON file; only their topic
names and times come from settings (``ETJ_MOODS_TOPIC`` ...), so deployments and tests can
rename them.

- ``moods``: recommendations × moods (docs/joins/mood-join.md). It names its tables as they were named
  before it was a spec (``mood-history``, ``recent-joins`` ...: existing changelogs stay valid)
  and validates with the wire models :class:`app.inputs.records.MoodIn` / ``RecommendationIn``.
- ``movies``: ratings × the movie version known at the rating's time; inner mode (a rating waits
  for its movie), 30-day emit window, and movie versions are never late: a catalogue may load a
  version stamped years ago, and a held rating may be waiting for exactly that one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.joins.dimensions import MultiDimensionJoin, is_multi, standalone
from app.joins.fk_spec import FkJoinSpec, check_together, is_foreign_key, resolve_fk
from app.joins.resolve import resolve_all
from app.joins.spec import JoinSpec, SpecError
from app.logic.event_range import Role
from app.settings import Settings


def mood_spec(s: Settings) -> dict[str, Any]:
    return {
        "name": "moods",
        "events": {
            "topic": s.events_topic,
            "model": "app.inputs.records:RecommendationIn",
            "key": "consultant",
            "time": "event_time",
            "id": "id",
            "copy": ["consultant", "event_time", "recommendation"],
        },
        "dimension": {
            "topic": s.moods_topic,
            "model": "app.inputs.records:MoodIn",
            "key": "name",
            "time": "event_time",
            "copy": ["mood"],
            "time_as": "mood_event_time",
        },
        "output": s.output_topic,
        "ticks": s.ticks_topic,
        "mode": "left",
        "asof": "before",
        "retention_ms": s.retention_ms,
        "review_lag_ms": s.review_lag_ms,
        # the names the mood join's tables (and changelogs) had before it was a spec; the rows
        # of recent-joins are one per join since the batch path (app.joins.state)
        "tables": {"dimension": "mood-history", "joins": "recent-joins", "clock": "stream-clock"},
    }


def movie_spec(s: Settings) -> dict[str, Any]:
    return {
        "name": "movies",
        "events": {
            "topic": s.ratings_topic,
            "key": "movie_id",
            "time": "event_time",
            "id": "id",
            "fields": {
                "id": "str",
                "movie_id": "str",
                "user_id": "str",
                "rating": "float",
                "event_time": "time",
            },
            "copy": ["movie_id", "user_id", "rating", "event_time"],
        },
        "dimension": {
            "topic": s.movies_topic,
            "key": "movie_id",
            "time": "event_time",
            "fields": {"movie_id": "str", "title": "str", "event_time": "time"},
            "copy": ["title"],
            "time_as": "movie_event_time",
        },
        "output": s.rated_movies_topic,
        "ticks": s.movie_ticks_topic,
        "mode": "inner",
        "asof": "at-or-before-else-earliest",
        "retention_ms": s.movie_retention_ms,
        "window_ms": s.movie_window_ms,
        "late_dimensions": False,
    }


def car_spec(s: Settings) -> dict[str, Any]:
    """``cars``: car positions x zone pollution (docs/joins/car-zone.md), a foreign-key join:
    a car's newest arrival points at a zone, whose newest reading it carries. Its tables keep
    the names (and bytes) they had before it was a spec."""
    return {
        "kind": "foreign-key",
        "name": "cars",
        "left": {
            "topic": s.car_arrivals_topic,
            "model": "app.inputs.records:CarArrivalIn",
            "key": "car_id",
            "time": "event_time",
            "foreign_key": "to_zone_id",
            "copy": ["fuel_level"],
            "time_as": "car_event_time",
        },
        "right": {
            "topic": s.zones_topic,
            "model": "app.inputs.records:ZoneIn",
            "key": "zone_id",
            "time": "event_time",
            "copy": ["pollution_level"],
            "time_as": "zone_event_time",
        },
        "output": s.car_pollution_topic,
        "moves": s.car_moves_topic,
        "ticks": s.car_ticks_topic,
        "tables": {"left": "car-positions", "right": "zone-pollution", "index": "zone-cars"},
    }


def read_joins_file(path: Path) -> list[dict[str, Any]]:
    """The specs of a JSON file: a list of spec objects (or ``{"joins": [...]}``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"ETJ_JOINS_FILE {path}: cannot read it: {exc}") from exc
    except ValueError as exc:
        raise SpecError(f"ETJ_JOINS_FILE {path}: not valid JSON: {exc}") from exc
    if isinstance(data, dict) and set(data) == {"joins"}:
        data = data["joins"]
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise SpecError(f"ETJ_JOINS_FILE {path}: expected a JSON list of join specs (objects)")
    return data


def load_all(s: Settings) -> tuple[list[JoinSpec], list[FkJoinSpec]]:
    """Every spec this worker runs, event-time ones and foreign-key ones, validated together
    (raises :class:`SpecError`): the built-in ones ``ETJ_BUILTIN_JOINS`` names (all without
    ``ETJ_JOINS_FILE``, none with it), then the file's."""
    builtins = s.builtins
    raws = [
        make(s)
        for name, make in (("moods", mood_spec), ("movies", movie_spec), ("cars", car_spec))
        if name in builtins
    ]
    if s.joins_file is not None:
        raws += read_joins_file(s.joins_file)
    events = resolve_all([r for r in raws if not is_foreign_key(r)], s.app_id)
    fks = [resolve_fk(r, i) for i, r in enumerate(raws) if is_foreign_key(r)]
    check_together(events, fks)
    return events, fks


def load_specs(s: Settings) -> list[JoinSpec]:
    """The event-time specs this worker runs (:func:`load_all`)."""
    return load_all(s)[0]


def load_fk_specs(s: Settings) -> list[FkJoinSpec]:
    """The foreign-key specs this worker runs (:func:`load_all`), the car join among them."""
    return load_all(s)[1]


def batch_specs(s: Settings) -> dict[str, JoinSpec]:
    """Name -> spec of every join the batch twin computes (``archive``, ``exact``,
    ``reconcile``, ``backfill``): each built-in one, whether or not this configuration's worker
    runs it, and this configuration's (``ETJ_JOINS_FILE``'s), which win on a name."""
    every_builtin = s.model_copy(update={"joins_file": None, "builtin_joins": None})
    return {spec.name: spec for spec in [*load_specs(every_builtin), *load_specs(s)]}


def batch_multi_specs(s: Settings) -> dict[str, MultiDimensionJoin]:
    """Name -> spec with several dimensions (only a joins file has them), as the batch twin
    computes it (:class:`app.joins.dimensions.MultiDimensionJoin`); its links are also in
    :func:`batch_specs`, each a join of its own."""
    if s.joins_file is None:
        return {}
    out = {}
    for i, raw in enumerate(read_joins_file(s.joins_file)):
        if is_multi(raw):
            last = resolve_all([raw], s.app_id)[-1]
            dims = tuple(
                (dim, resolve_all([one], s.app_id)[0]) for dim, one in standalone(raw, i, s.app_id)
            )
            out[raw["name"]] = MultiDimensionJoin(raw["name"], last, dims)
    return out


def batch_fk_specs(s: Settings) -> dict[str, FkJoinSpec]:
    """Name -> foreign-key spec the batch twin computes (as :func:`batch_specs`): the car join,
    and those of this configuration."""
    every_builtin = s.model_copy(update={"joins_file": None, "builtin_joins": None})
    return {spec.name: spec for spec in [*load_fk_specs(every_builtin), *load_fk_specs(s)]}


def topic_roles(specs: list[JoinSpec]) -> dict[str, list[tuple[Role, str | None]]]:
    """Topic -> (role, event-time field) for each join that reads or writes it: what an
    event-time range keeps of it (:func:`app.logic.event_range.needs`). The output's field is
    None when the spec does not copy the event time into it (then the whole log is kept)."""
    out: dict[str, list[tuple[Role, str | None]]] = {}
    for s in specs:
        dim: Role = "dimension-before" if s.asof == "before" else "dimension-earliest"
        out.setdefault(s.events.topic, []).append(("events", s.events.time))
        out.setdefault(s.dimension.topic, []).append((dim, s.dimension.time))
        out.setdefault(s.output, []).append(
            ("output", s.events.time if s.events.time in s.events.copy else None)
        )
    return out

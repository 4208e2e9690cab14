"""Spec validation: every mistake is refused with a message naming the spec and the field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from app.inputs.records import InvalidRecord, parse
from app.joins.catalog import load_specs, mood_spec, movie_spec, read_joins_file
from app.joins.resolve import copartition_groups, resolve, resolve_all
from app.joins.spec import SpecError
from app.kafka.copartition import CopartitionError, check_groups
from app.logic.event_join import Revision
from app.settings import Settings

S = Settings()


def movies(**changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(movie_spec(S))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = raw
        for p in parents:
            node = node[p]
        if value is ...:
            del node[leaf]
        else:
            node[leaf] = value
    return raw


def refused(raw: Any) -> str:
    with pytest.raises(SpecError) as exc:
        resolve_all(raw if isinstance(raw, list) else [raw])
    return str(exc.value)


def test_the_built_in_specs_resolve_and_describe_their_output():
    moods, films = load_specs(S)
    assert moods.output_fields == (
        "id",
        "consultant",
        "event_time",
        "recommendation",
        "mood",
        "mood_event_time",
        "revision",
        "previous_mood",
        "cause",
    )
    assert set(films.output_fields) == {
        "id",
        "movie_id",
        "user_id",
        "rating",
        "event_time",
        "title",
        "movie_event_time",
        "revision",
        "previous_title",
        "cause",
    }
    assert copartition_groups([films]) == [("etj-ratings", "etj-movies", "etj-movie-ticks")]


def test_records_are_read_and_written_as_the_wire_contract_says():
    films = resolve(movie_spec(S))
    rec = parse(
        films.events.model,
        b"m1",
        json.dumps(
            {"id": "r1", "movie_id": "m1", "user_id": "u", "rating": 4, "event_time": 7}
        ).encode(),
    )
    e = films.event_of(rec)
    assert (e.key, e.id, e.event_time, e.payload) == ("m1", "r1", 7, ("u", 4.0))
    wire = films.to_wire(
        Revision("r1", "m1", 7, ("u", 4.0), ("Up",), 5, 2, ("Up!",), "late-dimension")
    )
    assert wire == {
        "id": "r1",
        "movie_id": "m1",
        "user_id": "u",
        "rating": 4.0,
        "event_time": 7,
        "title": "Up",
        "movie_event_time": 5,
        "revision": 2,
        "previous_title": "Up!",
        "cause": "late-dimension",
    }


@pytest.mark.parametrize(
    "value, phrase",
    [
        (
            b'{"id": "r1", "movie_id": "m1", "user_id": "u", "rating": "4", "event_time": 1}',
            "rating",
        ),
        (
            b'{"id": "r1", "movie_id": "m1", "user_id": "u", "rating": NaN, "event_time": 1}',
            "finite",
        ),
        (
            b'{"id": "r1", "movie_id": "m2", "user_id": "u", "rating": 4, "event_time": 1}',
            "disagrees",
        ),
        (b'{"id": "r1", "movie_id": "m1", "user_id": "u", "rating": 4}', "event_time: missing"),
    ],
)
def test_declared_fields_are_validated_strictly(value, phrase):
    films = resolve(movie_spec(S))
    with pytest.raises(InvalidRecord, match=phrase):
        parse(films.events.model, b"m1", value)


@pytest.mark.parametrize(
    "raw, phrases",
    [
        (
            movies(events__copy=["movie_id", "user_id", "ratng"]),
            ["'movies'", "events.copy names 'ratng'", "etj-ratings", "they have: id, movie_id"],
        ),
        (movies(dimension__key="film_id"), ["dimension.key names 'film_id'"]),
        (movies(events__id="rating_id"), ["events.id names 'rating_id'"]),
        (
            movies(dimension__fields={"movie_id": "str", "title": "string", "event_time": "time"}),
            ["dimension.fields.title: unknown type 'string'"],
        ),
        (
            movies(dimension__fields={"movie_id": "str", "title": "str?", "event_time": "time"}),
            ["'title' is optional"],
        ),
        (
            movies(
                events__fields={
                    "id": "str",
                    "movie_id": "int",
                    "user_id": "str",
                    "rating": "float",
                    "event_time": "time",
                }
            ),
            ["events.key is int but dimension.key is str: they never match"],
        ),
        (
            movies(
                events__fields={
                    "id": "str",
                    "movie_id": "str",
                    "user_id": "str",
                    "rating": "float",
                    "event_time": "int",
                }
            ),
            ["events.time 'event_time' must be declared 'time'"],
        ),
        (movies(mode="outer"), ["mode: Input should be 'left' or 'inner'"]),
        (movies(asof="nearest"), ["asof: Input should be"]),
        (movies(windw_ms=5), ["windw_ms: unknown setting"]),
        (movies(events__colour="red"), ["events.colour: unknown setting"]),
        (movies(retention_ms=...), ["retention_ms: missing"]),
        (movies(window_ms=10**12), ["window_ms 1000000000000 exceeds retention_ms"]),
        (movies(dimension__time_as=...), ["dimension.time_as: missing"]),
        (movies(dimension__time_as="event_time"), ["output fields collide: event_time"]),
        (movies(dimension__model="app.inputs.records:MoodIn"), ["either 'fields'", "or 'model'"]),
        (movies(output="etj-ratings"), ["must be four different topics"]),
        (movies(name="Movies!"), ["name: String should match pattern"]),
    ],
)
def test_a_bad_spec_is_refused_with_a_clear_message(raw, phrases):
    message = refused(raw)
    for phrase in phrases:
        assert phrase in message, message


def test_a_model_must_exist_and_be_keyed_by_the_spec_key():
    bad = copy.deepcopy(mood_spec(S))
    bad["dimension"]["model"] = "app.inputs.records:NoSuchModel"
    assert "cannot be imported" in refused(bad)
    bad = copy.deepcopy(mood_spec(S))
    bad["dimension"]["key"] = "mood"
    assert "disagrees with app.inputs.records:MoodIn, whose records are keyed by 'name'" in refused(
        bad
    )


def test_conflicts_between_specs_are_refused():
    twin = movies()
    assert "share the name 'movies'" in refused([movies(), twin])
    other = movies(name="films", ticks="etj-film-ticks")
    assert "share the output topic 'etj-rated-movies'" in refused([movies(), other])
    loop = movies(
        name="films",
        ticks="etj-film-ticks",
        output="etj-films",
        events__topic="etj-rated-movies",
        dimension__topic="etj-films-dimension",
    )
    looped = movies(events__topic="etj-films")  # each reads the other's output
    assert "join specs 'movies' -> 'films' -> 'movies' form a loop" in refused([looped, loop])
    shared = movies(
        name="films", ticks="etj-film-ticks", output="etj-films", events__topic="etj-film-ratings"
    )  # the same dimension topic as movies: both are handed every record (app.compat.consumer)
    tables = {"dimension": "f-d", "joins": "f-j", "clock": "f-c"}
    assert [s.name for s in resolve_all([movies(), {**shared, "tables": tables}])] == [
        "movies",
        "films",
    ]
    assert refused([movies(), {**shared, "tables": tables, "start": "latest"}]) == (
        "join specs 'movies' (dimension) and 'films' (dimension) both read etj-movies but "
        "start at 'earliest' and 'latest': a worker reads a topic once, for every join that "
        "reads it, from one start; give both the same start"
    )


def test_joins_file_errors_name_the_file(tmp_path):
    path = tmp_path / "joins.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="joins.json: not valid JSON"):
        read_joins_file(path)
    path.write_text('{"name": "x"}')
    with pytest.raises(SpecError, match="expected a JSON list"):
        read_joins_file(path)
    path.write_text(json.dumps([movies(name="films", ticks="t2", output="o2", mode="outer")]))
    with pytest.raises(SpecError, match="join spec #3 'films': mode"):  # after the built-ins
        load_specs(S.model_copy(update={"joins_file": path, "builtin_joins": "moods,movies"}))


def test_non_copartitioned_spec_topics_are_refused_by_the_start_check():
    groups = [(f"join {s.name!r}", s.inputs, s.partitions or 4) for s in load_specs(S)]
    with pytest.raises(CopartitionError) as exc:
        check_groups({"etj-ratings": 4, "etj-movies": 2}, groups)
    assert "join 'movies': co-partitioned topics" in str(exc.value)
    assert "etj-ratings has 4, etj-movies has 2" in str(exc.value)
    check_groups({"etj-ratings": 4, "etj-movies": 4, "etj-movie-ticks": 4}, groups)


def test_each_group_is_checked_against_its_own_partition_count(tmp_path):
    """A user's 12-partition join and the 4-partition built-ins run side by side; each group
    is held to its own count, and the error names the group and every topic's count."""
    path = tmp_path / "joins.json"
    path.write_text(
        json.dumps(
            [
                movies(
                    name="views",
                    ticks="t2",
                    output="o2",
                    partitions=12,
                    events__topic="pv",
                    dimension__topic="tiers",
                )
            ]
        )
    )
    specs = load_specs(S.model_copy(update={"joins_file": path, "builtin_joins": "moods"}))
    assert [(s.name, s.partitions) for s in specs] == [("moods", None), ("views", 12)]
    groups = [(f"join {s.name!r}", s.inputs, s.partitions or 4) for s in specs]
    check_groups({"etj-events": 4, "etj-moods": 4, "pv": 12, "tiers": 12}, groups)
    with pytest.raises(CopartitionError) as exc:
        check_groups({"etj-events": 4, "etj-moods": 4, "pv": 12, "tiers": 4}, groups)
    assert (
        "join 'views': co-partitioned topics pv, tiers, t2 must have 12 partitions: "
        "pv has 12, tiers has 4"
    ) in str(exc.value)
    assert "moods" not in str(exc.value)
    with pytest.raises(CopartitionError) as exc:  # a spec without its topics' count
        check_groups(
            {"etj-events": 4, "etj-moods": 4, "pv": 12, "tiers": 12},
            [("join 'views'", ("pv", "tiers", "t2"), 4)],
        )
    assert "pv has 12, tiers has 12 (they agree on 12: give the join that count)" in str(exc.value)


def test_every_layout_value_loads_and_means_one_row_per_join():
    """Specs written when there were two layouts still load (``layout`` is accepted, unused),
    and a review lag works for every join (the review reads a partition's recent joins)."""
    for layout in ("per-key", "per-join"):
        spec = resolve(movies(layout=layout, review_lag_ms=1000))
        assert spec.review_lag_ms == 1000 and spec.tables.joins == "movies-joins"
        assert spec.tables.index is None


def test_a_joins_file_runs_alone_unless_the_built_ins_are_asked_for(tmp_path):
    path = tmp_path / "joins.json"
    path.write_text(
        json.dumps(
            [
                movies(
                    name="films", ticks="t2", output="o2", events__topic="r2", dimension__topic="m2"
                )
            ]
        )
    )
    with_file = S.model_copy(update={"joins_file": path})
    assert [s.name for s in load_specs(with_file)] == ["films"]
    assert with_file.builtins == frozenset()
    asked = with_file.model_copy(update={"builtin_joins": "moods, cars"})
    assert [s.name for s in load_specs(asked)] == ["moods", "films"]
    assert asked.builtins == {"moods", "cars"}
    assert [s.name for s in load_specs(S)] == ["moods", "movies"]  # no file: every built-in
    assert S.builtins == {"moods", "movies", "cars"}
    assert S.model_copy(update={"builtin_joins": "none"}).builtins == frozenset()
    with pytest.raises(ValueError, match="unknown join"):
        _ = S.model_copy(update={"builtin_joins": "moods,trains"}).builtins

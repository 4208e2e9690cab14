"""The msgspec parser (app.inputs.parsers.compile_parser) against today's (app.inputs.records.parse): the same
accept/refuse, the same values, the same dead-letter reason, on generated and hostile inputs.

Every wire model of a worker is held to it: the four built-in ones and the models a join spec
builds from its ``fields`` (the movies spec's, and one with every field type, optional ones
included).
"""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.inputs.parsers import as_dict, compile_parser
from app.inputs.records import (
    CarArrivalIn,
    CarMoveIn,
    InvalidRecord,
    MoodIn,
    RecommendationIn,
    ZoneIn,
    parse,
)
from app.joins.resolve import resolve

EVERY_TYPE = resolve(
    {
        "name": "every-type",
        "events": {
            "topic": "ev",
            "key": "k",
            "time": "t",
            "id": "id",
            "fields": {
                "id": "str?",
                "k": "str",
                "t": "time",
                "n": "int",
                "x": "float",
                "b": "bool",
                "s": "str?",
                "m": "int?",
            },
            "copy": ["k", "t", "n"],
        },
        "dimension": {
            "topic": "dim",
            "key": "k",
            "time": "t",
            "fields": {"k": "str", "t": "time", "v": "float"},
            "copy": ["v"],
            "time_as": "v_time",
        },
        "output": "out",
        "ticks": "ticks",
        "retention_ms": 1000,
    }
)
from app.joins.catalog import movie_spec  # noqa: E402
from app.settings import Settings  # noqa: E402

MOVIES = resolve(movie_spec(Settings()))
MODELS = [
    MoodIn,
    RecommendationIn,
    CarArrivalIn,
    ZoneIn,
    CarMoveIn,
    MOVIES.events.model,
    MOVIES.dimension.model,
    EVERY_TYPE.events.model,
    EVERY_TYPE.dimension.model,
]


def outcome(fn: Any, key: bytes | None, value: bytes | None) -> tuple[str, Any]:
    try:
        rec = fn(key, value)
    except InvalidRecord as exc:
        return "refused", str(exc)
    return "accepted", as_dict(rec)


def same(model: Any, key: bytes | None, value: bytes | None) -> None:
    old = outcome(lambda k, v: parse(model, k, v), key, value)
    new = outcome(compile_parser(model), key, value)
    assert new == old, (model.__name__, key, value)
    if old[0] == "accepted":  # the same types too (an int stays an int, a float a float)
        assert [type(v) for v in new[1].values()] == [type(v) for v in old[1].values()]


def test_every_built_in_and_spec_model_takes_the_fast_path():
    """The fast path is not silently skipped: every model of a worker compiles to it."""
    for model in MODELS:
        assert compile_parser(model).__name__ == "parse_fast", model.__name__


def test_a_parsed_record_is_not_tracked_by_the_collector():
    """One object fewer per record for the cyclic collector to traverse (issue 47)."""
    parse = compile_parser(RecommendationIn)
    rec = parse(b"c1", b'{"consultant": "c1", "recommendation": "r", "event_time": 5}')
    assert rec.event_time == 5 and not gc.is_tracked(rec)


# --- scalars of every kind, and the values that sit on a rule's edge ----------------------------

_edges = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            0,
            -1,
            1,
            2**31,
            2**63 - 1,
            2**63,
            2**64,
            -(2**63),
            4_102_444_800_000,
            4_102_444_799_999,
            0.0,
            -0.0,
            1.5,
            1e300,
            "",
            "x" * 200,
            "x" * 201,
            "x" * 10_000,
            "x" * 10_001,
            "ADD",
            "DEL",
            "add",
            "5",
            "1.0",
            "true",
            "\u00e9",
            "\ud800",
            "a\x00b",
            [],
            {},
            [1],
            {"a": 1},
        ]
    ),
    st.text(max_size=8),
)


def _record_for(model: Any, draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in model.model_fields:
        choice = draw(st.integers(0, 9))
        if choice == 0:
            continue  # missing
        out[name] = draw(_edges)
    if draw(st.booleans()):
        out[draw(st.sampled_from(["extra", "zz", "_x"]))] = draw(_edges)
    return out


@st.composite
def wire(draw: Any) -> tuple[Any, bytes | None, bytes | None]:
    model = draw(st.sampled_from(MODELS))
    record = _record_for(model, draw)
    key_field = model.key_field
    key: bytes | None
    if key_field in record and draw(st.integers(0, 4)):
        key = str(record[key_field]).encode("utf-8", errors="surrogatepass")
    else:
        key = draw(st.one_of(st.none(), st.binary(max_size=6), st.just(b"x")))
    try:
        text = json.dumps(
            record,
            allow_nan=True,
            separators=draw(st.sampled_from([(",", ":"), (", ", ": "), (",", " : ")])),
        )
    except (TypeError, ValueError):
        text = "{}"
    value = text.encode("utf-8", errors="surrogatepass")
    return model, key, value


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(wire())
def test_generated_records_are_parsed_alike(case):
    model, key, value = case
    same(model, key, value)


# --- hostile bytes ------------------------------------------------------------------------------

HOSTILE = [
    None,
    b"",
    b"null",
    b"[]",
    b"1",
    b'"x"',
    b"{",
    b"{}",
    b"\xff\xfe",
    b'{"name": "a"}',
    b'{"name":"ann","mood":"x","event_time":5,"name":"ann"}',  # a field named twice
    b'{"name":"ann","mood":"x","event_time":5, "name" : "ann"}',  # ... with spaces
    b'{"name":"ann","mood":"x","event_time":5,"extra":{"a":1,"a":2}}',  # twice, nested
    b'{"name":"ann","mood":"x","event_time":5,"note":"\\":\\""}',  # '":' inside a string
    b'{"name":"ann","mood":"x","event_time":5,"note":"a\\u0022:b"}',
    b'{"name":"ann","mood":"x","event_time":NaN}',
    b'{"name":"ann","mood":"x","event_time":1e3}',
    b'{"name":"ann","mood":"x","event_time":5.0}',
    b'{"name":"ann","mood":"x","event_time":-0}',
    b'{"name":"ann","mood":"x","event_time":99999999999999999999999}',
    b'{"name":"ann","mood":"\\ud800","event_time":5}',
    b'{"name":"ann","mood":"x","event_time":5}x',
    b'  {"name":"ann","mood":"x","event_time":5}  ',
    b'{"name":"ann","mood":"x","event_time":true}',
    b'{"name":"ann","mood":"x","event_time":"5"}',
    b'{"name":null,"mood":"x","event_time":5}',
    b'{"name":"ann","mood":"x","event_time":5,"ingestion_time":null}',
    b'{"name":"ann","mood":"x","event_time":5,"ingestion_time":1.5}',
    b"[" * 10_000 + b"]" * 10_000,
    b'{"car_id":1,"to_zone_id":2,"fuel_level":-0.0,"event_time":5}',
    b'{"car_id":1,"to_zone_id":2,"fuel_level":1e999,"event_time":5}',
    b'{"car_id":1,"to_zone_id":2,"fuel_level":Infinity,"event_time":5}',
    b'{"car_id":true,"to_zone_id":2,"fuel_level":1,"event_time":5}',
    b'{"op":"ADD","zone_id":3,"car_id":1,"to_zone_id":4,"fuel_level":1,"event_time":5}',
    b'{"op":"DEL","zone_id":3,"car_id":1,"to_zone_id":4,"fuel_level":1,"event_time":5}',
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("key", [None, b"ann", b"1", b"3", b"\xff"])
def test_hostile_inputs_are_parsed_alike(model, key):
    for value in HOSTILE:
        same(model, key, value)

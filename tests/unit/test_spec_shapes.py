"""Records shaped otherwise (issue U): dotted paths, event times in other formats or from the
Kafka timestamp, and where a new deployment starts. Each rule is held to an example a person
would write, and every refusal names the spec, the field and why."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.inputs.records import InvalidRecord
from app.inputs.time_formats import convert_time, iso_to_ms
from app.joins.resolve import resolve, resolve_all
from app.joins.spec import SpecError

pytestmark = pytest.mark.unit


def spec(
    events: dict[str, Any] | None = None, dimension: dict[str, Any] | None = None, **top: Any
) -> dict[str, Any]:
    """Page views (nested user, ISO time) × user tiers timed by the Kafka timestamp."""
    ev = {
        "topic": "views",
        "key": "user.id",
        "time": "at",
        "time_format": "iso8601",
        "id": "id",
        "fields": {"id": "str", "user.id": "str", "user.tier": "str?", "page": "str", "at": "time"},
        "copy": ["user.id", "user.tier", {"page": "path"}, "at"],
    }
    dim = {
        "topic": "tiers",
        "key": "user_id",
        "time": "$timestamp",
        "fields": {"user_id": "str", "tier": "str"},
        "copy": ["tier"],
        "time_as": "tier_time",
    }
    ev.update(events or {})
    dim.update(dimension or {})
    return {
        "name": "views",
        "events": ev,
        "dimension": dim,
        "output": "out",
        "ticks": "ticks",
        "retention_ms": 10**9,
        **top,
    }


def refused(raw: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as exc:
        resolve_all([raw])
    return str(exc.value)


def value(d: dict[str, Any]) -> bytes:
    return json.dumps(d).encode()


def test_nested_fields_land_under_their_path_with_underscores_unless_renamed():
    s = resolve(spec())
    assert s.output_fields[:5] == ("id", "user_id", "user_tier", "path", "at")
    assert s.events.shaped and s.dimension.shaped
    parse = s.events.parser()
    rec = parse(
        b"u1",
        value(
            {
                "id": "v1",
                "user": {"id": "u1", "tier": "gold"},
                "page": "/",
                "at": "2026-01-01T00:00:00.250+01:00",
            }
        ),
    )
    e = s.event_of(rec)
    assert (e.key, e.id, e.event_time) == ("u1", "v1", iso_to_ms("2025-12-31T23:00:00.25Z"))
    assert e.event_time == 1767222000250


def test_an_optional_nested_field_under_a_missing_parent_is_null():
    parse = resolve(
        spec(
            events={
                "key": "id",
                "fields": {
                    "id": "str",
                    "user.tier": "str?",
                    "page": "str",
                    "at": "time",
                    "user.id": "str?",
                },
            }
        )
    ).events.parser()
    rec = parse(b"v1", value({"id": "v1", "page": "/", "at": "2026-01-01T00:00:00Z"}))
    assert rec.user_tier is None and rec.user_id is None


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"id": "v1", "page": "/", "at": "2026-01-01T00:00:00Z"}, "user.id: missing"),
        (
            {"id": "v1", "user": 5, "page": "/", "at": "2026-01-01T00:00:00Z"},
            "user.id: user is number, not an object",
        ),
        (
            {"id": "v1", "user": {"id": "u1"}, "page": "/", "at": "2026-01-01T00:00:00"},
            "has no time zone",
        ),
        (
            {"id": "v1", "user": {"id": "u1"}, "page": "/", "at": "yesterday"},
            "is not an ISO-8601 time",
        ),
        (
            {"id": "v1", "user": {"id": "u2"}, "page": "/", "at": "2026-01-01T00:00:00Z"},
            "key 'u1' disagrees with user.id 'u2'",
        ),
    ],
)
def test_a_record_that_does_not_fit_is_refused_with_the_path_named(record, reason):
    parse = resolve(spec()).events.parser()
    with pytest.raises(InvalidRecord) as exc:
        parse(b"u1", value(record))
    assert reason in str(exc.value)


def test_the_kafka_timestamp_times_a_side_and_a_record_without_one_is_refused():
    parse = resolve(spec()).dimension.parser()
    rec = parse(b"u1", value({"user_id": "u1", "tier": "gold"}), 1234)
    assert rec.timestamp == 1234
    with pytest.raises(InvalidRecord, match=r"\$timestamp: the record has no Kafka timestamp"):
        parse(b"u1", value({"user_id": "u1", "tier": "gold"}), None)


@pytest.mark.parametrize(
    "fmt, raw, ms",
    [
        ("epoch_ms", 1500, 1500),
        ("epoch_s", 1.5, 1500),
        ("epoch_s", 2, 2000),
        ("epoch_s", 1.0005, 1001),
        ("epoch_us", 1_500_999, 1500),
        ("iso8601", "1970-01-01T00:00:01.5Z", 1500),
        ("iso8601", "1970-01-01 01:00:01-00:00", 3601000),
        ("iso8601", "1970-01-01T00:00:01.123999Z", 1123),
    ],
)
def test_time_formats_convert_to_epoch_ms(fmt, raw, ms):
    assert convert_time(raw, fmt) == ms


@pytest.mark.parametrize(
    "fmt, raw", [("epoch_s", -1), ("epoch_us", -1), ("iso8601", "2026-13-01T00:00:00Z")]
)
def test_times_that_are_not_times_are_refused(fmt, raw):
    with pytest.raises(InvalidRecord):
        convert_time(raw, fmt)


def test_a_flat_epoch_ms_side_keeps_the_fast_parser():
    s = resolve(
        spec(
            events={
                "key": "id",
                "time": "at",
                "time_format": "epoch_ms",
                "fields": {"id": "str", "page": "str", "at": "time"},
                "copy": ["page", "at"],
            }
        )
    )
    assert not s.events.shaped


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"events": {"copy": ["user.nmae"]}},
            "join spec #1 'views': events.copy names 'user.nmae', a field views records do not have",
        ),
        ({"events": {"time_format": "epoch_days"}}, "events.time_format: Input should be"),
        (
            {
                "events": {
                    "fields": {
                        "id": "str",
                        "user.id": "str",
                        "user_id": "str",
                        "page": "str",
                        "at": "time",
                    },
                    "copy": ["page"],
                }
            },
            "events: 'user.id' and 'user_id' would both be the field 'user_id'",
        ),
        (
            {"events": {"fields": {"id": "str", "user..id": "str", "page": "str", "at": "time"}}},
            "events.fields: 'user..id': an empty name (two dots, or a dot at an end)",
        ),
        ({"dimension": {"key": "$timestamp"}}, "dimension.key: $timestamp is the record's Kafka"),
        (
            {"dimension": {"time_format": "epoch_s"}},
            "dimension.time_format 'epoch_s': the Kafka timestamp ($timestamp) is epoch ms",
        ),
        (
            {"start": "2026-01-01T00:00:00"},
            "join spec #1 'views': start: '2026-01-01T00:00:00' has no time zone",
        ),
        ({"events": {"start": "soon"}}, "events.start: 'soon' is not an ISO-8601 time"),
        (
            {
                "events": {
                    "model": "app.inputs.records:MoodIn",
                    "fields": None,
                    "key": "name",
                    "time": "event_time",
                    "time_format": "epoch_s",
                    "copy": ["mood"],
                    "id": None,
                }
            },
            "events: time_format epoch_s needs 'fields', not 'model'",
        ),
    ],
)
def test_every_new_setting_is_validated_naming_the_spec_and_the_field(change, message):
    raw = spec()
    for side in ("events", "dimension"):
        raw[side].update(change.pop(side, {}))
    raw.update(change)
    assert message in refused(raw)


def test_start_is_per_side_and_a_topic_has_one_start():
    s = resolve(spec(start="latest", dimension={"start": "earliest"}))
    assert (s.events.start, s.dimension.start) == ("latest", "earliest")
    s = resolve(spec(events={"start": "2026-01-01T00:00:00Z"}))
    assert (s.events.start, s.dimension.start) == (1767225600000, "earliest")
    other = spec(name="other", output="out2", ticks="ticks2", start="latest")
    with pytest.raises(SpecError, match="both read views but start at 'earliest' and 'latest'"):
        resolve_all(
            [spec(), {**other, "tables": {"dimension": "o-d", "joins": "o-j", "clock": "o-c"}}]
        )


def test_archive_writes_a_shaped_side_flat_as_the_worker_reads_it(monkeypatch, tmp_path):
    """The batch twin reads spec inputs from archives: a nested, ISO-timed side is archived
    flat with an epoch-ms time, and a ``$timestamp`` side gets the record's timestamp as its
    time; a record the worker would refuse is left out."""
    from app.commands import archive as A
    from app.settings import Settings

    path = tmp_path / "joins.json"
    path.write_text(json.dumps([spec()]))
    monkeypatch.setattr(A, "settings", Settings(joins_file=path))
    sides = A.input_models()
    views = sides["views"]
    got = A.archive_value(
        views,
        b"u1",
        value({"id": "v1", "user": {"id": "u1"}, "page": "/", "at": "1970-01-01T00:00:01Z"}),
        99,
    )
    assert got == {"id": "v1", "user_id": "u1", "path": "/", "at": 1000}
    assert A.archive_value(views, b"u1", value({"id": "v1", "page": "/", "at": 1}), 99) is None
    assert A.archive_value(
        sides["tiers"], b"u1", value({"user_id": "u1", "tier": "gold"}), 1234
    ) == {"user_id": "u1", "tier": "gold", "timestamp": 1234}
    assert [c for c, _ in A.parquet_columns("views")] == [
        "id",
        "user_id",
        "user_tier",
        "path",
        "at",
    ]

"""Keys and names as Kafka shops have them (issue Z): int key fields and composite keys compared
with the record key by their text, a model keyed by an int handled and one keyed otherwise
refused, fields with odd names (``@timestamp``, ``_id``, ``user-id``, a dot in a name), ``json``
fields, Kafka headers, and event times as floats, strings, ``epoch_ns`` and ISO zones without a
colon. Records in, the flat record (or the dead letter's reason) out."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest

from app.inputs.paths import PathError, flat_name, split_path
from app.inputs.records import InvalidRecord, WireModel
from app.inputs.time_formats import convert_time, iso_to_ms
from app.joins.rekey import rekeyer
from app.joins.resolve import resolve
from app.joins.spec import JoinSpec, SpecError

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def spec(**sides: dict[str, Any]) -> dict[str, Any]:
    """A spec of page views x tiers, with each side's settings replaced by ``sides``."""
    events = {
        "topic": "views",
        "key": "user",
        "time": "at",
        "id": "id",
        "fields": {"id": "str", "user": "str", "at": "time"},
        "copy": ["user", "at"],
    }
    dimension = {
        "topic": "tiers",
        "key": "user",
        "time": "at",
        "fields": {"user": "str", "tier": "str", "at": "time"},
        "copy": ["tier"],
        "time_as": "tier_time",
    }
    events.update(sides.get("events", {}))
    dimension.update(sides.get("dimension", {}))
    return {
        "name": "views",
        "events": events,
        "dimension": dimension,
        "output": "out",
        "ticks": "ticks",
        "retention_ms": 86_400_000,
    }


def read(s: JoinSpec, side: str, key: bytes | None, value: dict[str, Any], **kw: Any) -> Any:
    """One record of ``side`` through its parser: the flat record as a dict, or the reason."""
    parse = getattr(s, side).parser()
    try:
        rec = parse(key, json.dumps(value).encode(), kw.get("timestamp"), kw.get("headers"))
    except InvalidRecord as exc:
        return str(exc)
    return {f: getattr(rec, f) for f in getattr(s, side).field_names}


# --- int keys --------------------------------------------------------------------------------


def test_an_int_key_field_equals_the_record_key_by_its_text_and_is_copied_as_an_int():
    s = resolve(
        spec(
            events={"fields": {"id": "str", "user": "int", "at": "time"}},
            dimension={"fields": {"user": "int", "tier": "str", "at": "time"}},
        )
    )
    assert read(s, "events", b"42", {"id": "v1", "user": 42, "at": T0})["user"] == 42
    assert "key '042' disagrees with user '42'" in read(
        s, "events", b"042", {"id": "v1", "user": 42, "at": T0}
    )
    rec = s.events.parser()(b"42", b'{"id": "v1", "user": 42, "at": 5}')
    event = s.event_of(rec)
    assert event.key == "42"  # the join's state is keyed by the text
    assert event.payload == (42,)  # the copied key keeps its type
    dim = s.dimension.parser()(b"42", b'{"user": 42, "tier": "gold", "at": 1}')
    assert s.key_of(dim, s.dimension) == "42"


def test_an_int_key_on_one_side_and_a_str_key_on_the_other_never_match():
    with pytest.raises(SpecError) as exc:
        resolve(spec(events={"fields": {"id": "str", "user": "int", "at": "time"}}))
    assert "events.key is int but dimension.key is str: they never match" in str(exc.value)


class FloatKeyed(WireModel):
    """A wire model keyed by a float: no text of it is a record key a producer would write."""

    price: float
    at: int

    key_field: ClassVar[str] = "price"


def test_a_model_keyed_by_an_int_is_handled_and_a_float_key_is_refused_at_start():
    raw = spec(
        events={
            "topic": "cars",
            "model": "app.inputs.records:CarArrivalIn",
            "key": "car_id",
            "time": "event_time",
            "fields": None,
            "copy": ["car_id", "fuel_level"],
        },
        dimension={"key": "car_id", "fields": {"car_id": "int", "tier": "str", "at": "time"}},
    )
    del raw["events"]["id"], raw["events"]["fields"]
    s = resolve(raw)
    rec = s.events.parser()(
        b"7", b'{"car_id": 7, "to_zone_id": 1, "fuel_level": 0.5, "event_time": 3}'
    )
    assert s.event_of(rec).key == "7"  # it once crashed the first state write (key.encode)
    raw["events"].update(model=f"{__name__}:FloatKeyed", key="price", time="at", copy=["price"])
    with pytest.raises(SpecError) as exc:
        resolve(raw)
    assert str(exc.value) == (
        f"join spec 'views': events.model '{__name__}:FloatKeyed': its key field 'price' is "
        "float; a key is a required str or int (the record key is compared with its text, "
        "and the join's state is keyed by that text)"
    )


# --- composite keys -------------------------------------------------------------------------


def composite() -> JoinSpec:
    return resolve(
        spec(
            events={
                "key": ["tenant", "user.id"],
                "fields": {"id": "str", "tenant": "str", "user.id": "int", "at": "time"},
                "copy": ["tenant", "user.id", "at"],
            },
            dimension={
                "key": ["org", "uid"],
                "fields": {"org": "str", "uid": "int", "tier": "str", "at": "time"},
            },
        )
    )


def test_a_composite_key_is_the_json_array_of_its_parts():
    s = composite()
    value = {"id": "v1", "tenant": "acme", "user": {"id": 42}, "at": T0}
    assert read(s, "events", b'["acme",42]', value)["user_id"] == 42
    assert read(s, "events", b'["acme", 42]', value) == (
        """key '["acme", 42]' disagrees with ["tenant", "user.id"] '["acme",42]'"""
    )
    assert "has no key; it must be keyed by" in read(s, "events", None, value)
    rec = s.events.parser()(b'["acme",42]', json.dumps(value).encode())
    assert s.event_of(rec).key == '["acme",42]'
    assert s.event_of(rec).payload == ("acme", 42)  # each part copied as it is
    dim = s.dimension.parser()(b'["acme",42]', b'{"org": "acme", "uid": 42, "tier": "t", "at": 1}')
    assert s.key_of(dim, s.dimension) == '["acme",42]'


def test_a_repartition_hop_rekeys_by_the_composite_key_whatever_the_record_key():
    raw = spec(
        events={
            "key": ["tenant", "$header.user"],
            "repartition": True,
            "fields": {"id": "str", "tenant": "str", "$header.user": "str", "at": "time"},
        },
        dimension={
            "key": ["org", "uid"],
            "fields": {"org": "str", "uid": "str", "tier": "str", "at": "time"},
        },
    )
    raw["events"]["copy"] = ["tenant", "at"]
    s = resolve(raw)
    rekey = rekeyer(s.events)
    key, t = rekey(b'{"id": "v1", "tenant": "acme", "at": 5}', None, [("user", b"u\xc3\xa9")])
    assert (key, t) == ('["acme","ué"]'.encode(), 5)
    with pytest.raises(InvalidRecord, match=r"\$header.user: missing"):
        rekey(b'{"id": "v1", "tenant": "acme", "at": 5}', None, [])


@pytest.mark.parametrize(
    "change, message",
    [
        ({"events": {"key": ["user"]}}, "events.key: a composite key lists two fields or more"),
        ({"events": {"key": ["user", "user"]}}, "events.key lists a field twice"),
        (
            {
                "events": {
                    "key": ["user", "at"],
                    "fields": {"id": "str", "user": "str", "at": "float"},
                }
            },
            "events.key 'at' must be declared 'str' or 'int'",
        ),
        (
            {"events": {"key": ["user", "nope"]}},
            "events.key names 'nope', a field views records do not have",
        ),
        (
            {"events": {"key": ["user", "id"]}},
            "events.key is (str, str) but dimension.key is str: they never match",
        ),
        (
            {"events": {"fields": {"id": "str", "user": "str?", "at": "time"}}},
            "events.key 'user' must be declared 'str' or 'int'",
        ),
    ],
)
def test_a_bad_key_is_refused_naming_the_spec_the_side_and_the_field(change, message):
    with pytest.raises(SpecError) as exc:
        resolve(spec(**change))
    assert str(exc.value).startswith("join spec 'views': ")
    assert message in str(exc.value)


# --- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, parts, flat",
    [
        ("user.id", ("user", "id"), "user_id"),
        ("[user.id]", ("user.id",), "user_id"),
        ("@timestamp", ("@timestamp",), "timestamp"),
        ("_id", ("_id",), "id"),
        ("user-id", ("user-id",), "user_id"),
        ("meta.[@at.utc]", ("meta", "@at.utc"), "meta_at_utc"),
        ("[$timestamp]", ("$timestamp",), "timestamp"),
        ("1st", ("1st",), "f_1st"),
    ],
)
def test_any_field_is_named_by_a_path_with_bracketed_names(path, parts, flat):
    assert split_path(path) == parts
    assert flat_name(path) == flat


@pytest.mark.parametrize(
    "path, why",
    [
        ("a..b", "an empty name"),
        ("[a.b", "never closed"),
        ("[a]b", "must end the path or come before '.'"),
        ("$foo", "written in brackets ('[$foo]')"),
        ("a[b]", "a name with a bracket"),
        ("@", "no letter or digit"),
    ],
)
def test_a_path_that_cannot_be_read_says_why(path, why):
    with pytest.raises(PathError, match=None) as exc:
        flat_name(path)
    assert why in str(exc.value)


def test_odd_names_are_read_in_every_place_a_path_is_taken():
    s = resolve(
        spec(
            events={
                "key": "user-id",
                "time": "@timestamp",
                "id": "_id",
                "fields": {"_id": "str", "user-id": "str", "[a.b]": "str", "@timestamp": "time"},
                "copy": ["user-id", {"[a.b]": "ab"}, "@timestamp"],
            }
        )
    )
    value = {"_id": "v1", "user-id": "u1", "a.b": "x", "a": {"b": "nested"}, "@timestamp": T0}
    assert read(s, "events", b"u1", value) == {
        "id": "v1",
        "user_id": "u1",
        "ab": "x",
        "timestamp": T0,
    }
    assert s.output_fields[:4] == ("id", "user_id", "ab", "timestamp")
    assert s.id_field == "id"


# --- json fields ----------------------------------------------------------------------------


def test_a_json_field_copies_an_object_or_an_array_as_it_is():
    s = resolve(
        spec(
            events={
                "fields": {
                    "id": "str",
                    "user": "str",
                    "cart": "json",
                    "tags": "json?",
                    "at": "time",
                },
                "copy": ["user", "cart", "tags", "at"],
            }
        )
    )
    got = read(s, "events", b"u1", {"id": "v1", "user": "u1", "cart": {"items": [1, 2]}, "at": 5})
    assert got["cart"] == {"items": [1, 2]} and got["tags"] is None
    assert "cart: missing" in read(s, "events", b"u1", {"id": "v1", "user": "u1", "at": 5})
    assert "null is not a value here" in read(
        s, "events", b"u1", {"id": "v1", "user": "u1", "cart": None, "at": 5}
    )


def test_a_json_field_is_refused_where_it_cannot_be_ordered_or_hashed():
    with pytest.raises(SpecError, match="dimension.copy field 'tier' is json"):
        resolve(spec(dimension={"fields": {"user": "str", "tier": "json", "at": "time"}}))
    raw = spec(events={"fields": {"id": "str", "user": "str", "cart": "json", "at": "time"}})
    raw["events"]["copy"] = ["user", "cart"]
    del raw["events"]["id"]
    with pytest.raises(SpecError, match="events.copy field 'cart' is json: a join id"):
        resolve(raw)


# --- headers --------------------------------------------------------------------------------


def test_header_fields_are_read_as_text_or_as_a_time():
    s = resolve(
        spec(
            events={
                "time": "$header.ce_time",
                "time_format": "iso8601",
                "fields": {
                    "id": "str",
                    "user": "str",
                    "$header.tenant": "str",
                    "$header.trace.id": "str?",
                    "$header.ce_time": "time",
                },
                "copy": ["user", "$header.tenant", "$header.trace.id", "$header.ce_time"],
            }
        )
    )
    headers = [("tenant", b"old"), ("tenant", b"acme"), ("ce_time", b"2026-01-01T01:00:00+0100")]
    got = read(s, "events", b"u1", {"id": "v1", "user": "u1"}, headers=headers)
    assert got == {"id": "v1", "user": "u1", "tenant": "acme", "trace_id": None, "ce_time": T0}
    assert "$header.tenant: missing" in read(
        s,
        "events",
        b"u1",
        {"id": "v1", "user": "u1"},
        headers=[("ce_time", b"2026-01-01T00:00:00Z")],
    )
    assert "$header.tenant: not UTF-8 text" in read(
        s, "events", b"u1", {"id": "v1", "user": "u1"}, headers=[("tenant", b"\xff")]
    )


def test_a_header_declared_other_than_text_or_time_is_refused():
    with pytest.raises(SpecError, match=r"events.fields.\$header.n: a header is text"):
        resolve(
            spec(events={"fields": {"id": "str", "user": "str", "$header.n": "int", "at": "time"}})
        )


# --- clocks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-01T02:00:00+02:00",
        "2026-01-01T02:00:00+0200",
        "2026-01-01T02:00:00+02",
        "2026-01-01t00:00:00z",
        "2025-12-31T19:00:00-0500",
    ],
)
def test_iso_times_with_any_zone_iso_allows_are_the_same_instant(text):
    assert iso_to_ms(text) == T0


@pytest.mark.parametrize(
    "raw, fmt, ms",
    [
        (1_767_225_600.5, "epoch_s", T0 + 500),
        ("1767225600.5", "epoch_s", T0 + 500),
        ("1767225600500", "epoch_ms", T0 + 500),
        (1_767_225_600_500.9, "epoch_ms", T0 + 500),
        (1_767_225_600_500_999, "epoch_us", T0 + 500),
        ("1767225600500999", "epoch_us", T0 + 500),
        (1_767_225_600_500_999_999, "epoch_ns", T0 + 500),
        ("1767225600500999999", "epoch_ns", T0 + 500),
    ],
)
def test_epoch_times_as_floats_strings_and_nanoseconds(raw, fmt, ms):
    assert convert_time(raw, fmt) == ms


@pytest.mark.parametrize("raw", ["1e12", "-5", "12:00", " 5"])
def test_an_epoch_string_that_is_not_digits_is_refused(raw):
    with pytest.raises(InvalidRecord, match="is not an epoch time"):
        convert_time(raw, "epoch_ms")


def test_epoch_ms_written_out_reads_floats_and_strings_and_left_out_stays_strict():
    strict = resolve(spec())
    given = resolve(spec(events={"time_format": "epoch_ms"}))
    value = {"id": "v1", "user": "u1", "at": str(T0)}
    assert "Input should be a valid integer" in read(strict, "events", b"u1", value)
    assert read(given, "events", b"u1", value)["at"] == T0
    assert not given.events.shaped  # a plain record still takes the fast path
    assert read(given, "events", b"u1", {**value, "at": T0})["at"] == T0


def test_a_header_time_without_a_time_format_is_epoch_ms_as_text():
    s = resolve(
        spec(
            events={
                "time": "$header.ts",
                "fields": {"id": "str", "user": "str", "$header.ts": "time"},
                "copy": ["user", "$header.ts"],
            }
        )
    )
    got = read(s, "events", b"u1", {"id": "v1", "user": "u1"}, headers=[("ts", str(T0).encode())])
    assert got["ts"] == T0


def test_a_copied_field_named_as_a_field_etj_adds_to_every_revision_is_refused():
    raw = spec(events={"fields": {"id": "str", "user": "str", "partition": "int", "at": "time"}})
    raw["events"]["copy"] = ["user", "partition", "at"]
    with pytest.raises(SpecError, match="output field 'partition' is etj's own"):
        resolve(raw)
    raw["events"]["copy"] = ["user", {"partition": "part"}, "at"]
    assert "part" in resolve(raw).output_fields


def test_a_foreign_key_spec_takes_int_keys_declared_in_fields():
    from app.joins.fk_spec import resolve_fk

    fk = resolve_fk(
        {
            "kind": "foreign-key",
            "name": "devices",
            "left": {
                "topic": "devices",
                "key": "device_id",
                "foreign_key": "site_id",
                "time": "at",
                "fields": {"device_id": "int", "site_id": "int", "at": "time"},
                "copy": [],
                "time_as": "device_time",
            },
            "right": {
                "topic": "sites",
                "key": "site_id",
                "time": "at",
                "fields": {"site_id": "int", "site": "str", "at": "time"},
                "copy": ["site"],
                "time_as": "site_time",
            },
            "output": "device-sites",
            "moves": "device-moves",
            "ticks": "device-ticks",
        }
    )
    assert fk.int_keys  # the car join's 16-byte index keys
    rec = fk.left.parser()(b"7", b'{"device_id": 7, "site_id": 3, "at": 1}')
    assert fk.left_of(rec).key == 7

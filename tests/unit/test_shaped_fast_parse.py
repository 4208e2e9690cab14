"""The shaped parser's fast steps (issue 47) answer as the steps they stand in for: msgspec's
decoding of a record value is taken only when it is exactly what the standard library's
parser reads (a field named twice, a value msgspec refuses: the standard parser decides), and
an ISO-8601 time counted in integers is the ``datetime`` way's, or that way says why not."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.inputs.parsers import _fast_object
from app.inputs.records import InvalidRecord, json_object
from app.inputs.time_formats import iso_to_ms

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def _hostile(draw_value: str, edits: list[tuple[int, str]]) -> bytes:
    text = draw_value
    for at, piece in edits:
        at %= len(text) + 1
        text = text[:at] + piece + text[at:]
    return text.encode("utf-8", errors="surrogatepass")


_pieces = st.sampled_from(
    [
        '"a": 1, ',
        ', "a": 2',
        '"a" : 3, ',
        " ",
        '\\"',
        '":',
        "{",
        "}",
        "[",
        "]",
        ",",
        "NaN",
        "1e400",
        '"\\ud800"',
        "\x01",
        '"x":{"x":1},',
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.text(max_size=3), _json, max_size=4),
    st.lists(st.tuples(st.integers(0, 200), _pieces), max_size=3),
    st.booleans(),
)
def test_msgspec_is_taken_only_for_what_the_standard_parser_reads_alike(obj, edits, spaced):
    value = _hostile(json.dumps(obj, separators=(", ", ": ") if spaced else (",", ":")), edits)
    fast = _fast_object(value)
    try:
        slow: object = json_object(value)
    except InvalidRecord as exc:
        slow = exc
    if fast is not None:
        assert not isinstance(slow, InvalidRecord), (value, slow)
        assert repr(fast) == repr(slow)  # same keys, order, values and types (1 is not 1.0)


@pytest.mark.parametrize(
    "value",
    [
        b'{"a": 1, "a": 2}',
        b'{"u": {"id": 1, "id": 2}}',
        b'{"l": [{"b": 1}, {"c": 2, "c": 3}]}',
        b'{"a" : 1, "a": 2}',
    ],
)
def test_a_field_named_twice_is_left_to_the_standard_parser(value):
    assert _fast_object(value) is None
    with pytest.raises(InvalidRecord, match="duplicate field"):
        json_object(value)


def _iso_by_datetime(text: str) -> int:
    """The ``datetime`` way alone (what iso_to_ms did before counting in integers)."""
    from app.inputs.time_formats import _ISO

    y, mo, d, h, mi, s, frac, z, sign, oh, om = _ISO.fullmatch(text).groups()  # type: ignore
    offset = (
        dt.timedelta(0)
        if z
        else (1 if sign == "+" else -1) * dt.timedelta(hours=int(oh), minutes=int(om))
    )
    when = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=dt.timezone(offset))
    return int(when.timestamp()) * 1000 + int((frac or "0")[:3].ljust(3, "0"))


@settings(max_examples=500, deadline=None)
@given(
    st.integers(1, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
    st.one_of(st.none(), st.text("0123456789", min_size=1, max_size=9)),
    st.one_of(
        st.just("Z"), st.tuples(st.sampled_from("+-"), st.integers(0, 25), st.integers(0, 61))
    ),
)
def test_an_iso_time_is_the_datetime_ways(y, mo, d, h, mi, s, frac, zone):
    z = zone if zone == "Z" else f"{zone[0]}{zone[1]:02d}:{zone[2]:02d}"
    text = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{'.' + frac if frac else ''}{z}"
    try:
        expected: object = _iso_by_datetime(text)
    except (ValueError, OverflowError):
        expected = InvalidRecord
    if expected is InvalidRecord:
        with pytest.raises(InvalidRecord, match="is not a valid time"):
            iso_to_ms(text)
    else:
        assert iso_to_ms(text) == expected

"""(zone_id, car_id) keys: byte order is numeric order over the whole int64 range."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.state.ordered_keys import (
    INT64_MAX,
    INT64_MIN,
    KEY_SIZE,
    decode_zone_car,
    encode_int64,
    encode_zone_car,
    prefix_end,
    zone_prefix,
)

int64 = st.integers(INT64_MIN, INT64_MAX)
# near the edges and around 0 / 2**32 on purpose: where naive encodings break
edgy = st.one_of(
    int64,
    st.sampled_from(
        [
            INT64_MIN,
            INT64_MIN + 1,
            -(2**32),
            -256,
            -1,
            0,
            1,
            255,
            256,
            2**31 - 1,
            2**32,
            INT64_MAX - 1,
            INT64_MAX,
        ]
    ),
)
pairs = st.tuples(edgy, edgy)


@given(st.lists(pairs, min_size=2, max_size=40))
def test_byte_order_is_numeric_zone_then_car_order(keys):
    assert sorted(keys, key=lambda k: encode_zone_car(*k)) == sorted(keys)


@given(pairs, pairs)
def test_each_comparison_agrees(a, b):
    ea, eb = encode_zone_car(*a), encode_zone_car(*b)
    assert (ea < eb) == (a < b) and (ea == eb) == (a == b)


@given(pairs)
def test_decode_round_trips_and_width_is_fixed(k):
    raw = encode_zone_car(*k)
    assert len(raw) == KEY_SIZE
    assert decode_zone_car(raw) == k


@given(edgy, edgy)
def test_zone_range_holds_exactly_that_zones_keys(zone, other_zone):
    lo, hi = zone_prefix(zone), prefix_end(zone_prefix(zone))
    for car in (INT64_MIN, -1, 0, 1, INT64_MAX):
        key = encode_zone_car(other_zone, car)
        inside = lo <= key and (hi is None or key < hi)
        assert inside == (other_zone == zone)


def test_last_zone_has_no_upper_end_and_others_do():
    assert prefix_end(zone_prefix(INT64_MAX)) is None
    assert prefix_end(zone_prefix(5)) == zone_prefix(6)
    end = prefix_end(zone_prefix(255))  # carries into the next byte (and may be shorter)
    assert encode_zone_car(255, INT64_MAX) < end <= encode_zone_car(256, INT64_MIN)
    assert prefix_end(b"\x01\xff\xff") == b"\x02"


@pytest.mark.parametrize("bad", [INT64_MAX + 1, INT64_MIN - 1, 2**64])
def test_out_of_range_ids_are_refused(bad):
    with pytest.raises(ValueError, match="64-bit"):
        encode_int64(bad)


@pytest.mark.parametrize("bad", [True, 1.0, "1"])
def test_non_int_ids_are_refused(bad):
    with pytest.raises(TypeError):
        encode_int64(bad)


def test_wrong_length_keys_are_refused():
    with pytest.raises(ValueError, match="16 bytes"):
        decode_zone_car(b"\x00" * 15)

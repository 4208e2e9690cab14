"""Records from the future: the one pure rule (app/logic/future_records.py), as scenarios and as the
property it exists for — stream and batch decide alike whenever they run."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.logic.future_records import (
    from_the_future,
    kafka_timestamp,
    reference_time,
    refusal_reason,
    timestamp_from_seconds,
)
from app.settings import Settings

NOW = 1_000_000
TOL = 300_000


def test_the_reference_is_the_timestamp_unless_it_is_ahead_of_the_clock():
    # 1. an honest record: produced before now -> its own timestamp
    assert reference_time(900_000, NOW) == 900_000
    # 2. a producer whose clock runs ahead -> the wall clock bounds it
    assert reference_time(5_000_000, NOW) == NOW
    # 3. no timestamp (message format v0: clients report -1) -> the wall clock
    assert kafka_timestamp(-1) is None and kafka_timestamp(None) is None
    assert kafka_timestamp(0) == 0
    assert reference_time(kafka_timestamp(-1), NOW) == NOW
    # Faust hands the stream seconds (ms / 1000.0): back to the archive's exact milliseconds
    assert timestamp_from_seconds(1_790_000_000_123 / 1000.0) == 1_790_000_000_123
    assert timestamp_from_seconds(-1 / 1000.0) is None and timestamp_from_seconds(None) is None


def test_refused_only_past_the_tolerance():
    ts = 900_000
    assert not from_the_future(ts + TOL, ts, NOW, TOL)  # exactly at the tolerance: accepted
    assert from_the_future(ts + TOL + 1, ts, NOW, TOL)
    assert not from_the_future(0, ts, NOW, TOL)  # the past is never "future" (late is apart)
    # stamped ahead by its own producer: held against the clock, caught live
    assert from_the_future(NOW + TOL + 1, NOW + 10 * TOL, NOW, TOL)
    assert not from_the_future(NOW + TOL, NOW + 10 * TOL, NOW, TOL)


def test_the_dead_letter_reason_says_against_what_and_by_how_much():
    assert refusal_reason(1_300_001, 1_000_000, 2_000_000, TOL) == (
        "event time 1300001 is 300001 ms ahead of its Kafka timestamp (1000000); at most "
        "300000 ms ahead is accepted (ETJ_MAX_FUTURE_MS)"
    )
    assert "ahead of the wall clock (2000000)" in refusal_reason(9_000_000, None, 2_000_000, TOL)
    assert "ahead of the wall clock" in refusal_reason(9_000_000, 5_000_000, 2_000_000, TOL)


@given(
    event_time=st.integers(0, 10**7),
    timestamp=st.integers(0, 10**7),
    later=st.integers(0, 10**7),
    tolerance=st.integers(0, 10**6),
)
def test_a_record_not_stamped_ahead_is_judged_alike_whenever_it_is_judged(
    event_time, timestamp, later, tolerance
):
    """The stream judges at ``seen`` (its clock when it reads the record: not before the record
    was produced), a batch run at any later time: same answer."""
    seen = timestamp  # the earliest a record can be read is when it was written
    assert from_the_future(event_time, timestamp, seen, tolerance) == from_the_future(
        event_time, timestamp, seen + later, tolerance
    )


def test_the_setting_and_its_default():
    assert Settings().max_future_ms == 300_000
    assert Settings(max_future_ms=0).max_future_ms == 0
    assert "55 min late" in (Settings.model_fields["max_future_ms"].description or "")


@given(ms=st.integers(0, 4_102_444_800_000))
def test_faust_s_seconds_give_back_every_millisecond(ms):
    assert timestamp_from_seconds(ms / 1000.0) == ms

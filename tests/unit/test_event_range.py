"""An event-time range (app/logic/event_range.py): how ``--from``/``--to`` are read, and which
records the joins of its events need."""

from __future__ import annotations

import pytest

from app.joins.catalog import load_specs, topic_roles
from app.logic.event_range import EventRange, needs, parse_time
from app.settings import Settings


def test_times_are_epoch_ms_iso_dates_or_iso_date_times():
    assert parse_time("1790000000000") == 1_790_000_000_000
    assert parse_time("2026-10-01") == 1_790_812_800_000  # midnight UTC
    assert parse_time("2026-10-01T00:00:00Z") == 1_790_812_800_000
    assert parse_time("2026-10-01T02:00:00+02:00") == 1_790_812_800_000
    assert parse_time("1970-01-01T00:00:00.020Z") == 20  # exact milliseconds
    with pytest.raises(ValueError, match="neither epoch milliseconds nor an ISO"):
        parse_time("last month")
    with pytest.raises(ValueError, match="empty event-time range"):
        EventRange(30, 30)


def test_what_each_role_keeps_of_october():
    october = EventRange(parse_time("2026-10-01"), parse_time("2026-11-01"))
    sep, oct_, nov = parse_time("2026-09-15"), parse_time("2026-10-15"), parse_time("2026-11-15")
    # events and output revisions: the range itself
    assert [needs(october, "events", t) for t in (sep, oct_, nov)] == [False, True, False]
    assert [needs(october, "output", t) for t in (sep, oct_, nov)] == [False, True, False]
    # a `before` dimension: everything before the end (an event on Oct 1 needs September's)
    assert [needs(october, "dimension-before", t) for t in (sep, oct_, nov)] == [True, True, False]
    # `at-or-before-else-earliest`: a key's first version may come after the range
    assert [needs(october, "dimension-earliest", t) for t in (sep, oct_, nov)] == [True, True, True]
    assert needs(october, "events", None)  # no event time to judge: kept
    assert all(needs(EventRange(), "events", t) for t in (sep, oct_, nov))


def test_every_join_gives_its_topics_their_roles():
    roles = topic_roles(load_specs(Settings()))
    s = Settings()
    assert roles[s.events_topic] == [("events", "event_time")]
    assert roles[s.moods_topic] == [("dimension-before", "event_time")]
    assert roles[s.movies_topic] == [("dimension-earliest", "event_time")]
    assert roles[s.output_topic] == [("output", "event_time")]
    assert s.car_arrivals_topic not in roles  # the car view is the view of now

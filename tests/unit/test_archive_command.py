"""The ``archive`` command's record handling, without a broker: every join's inputs validated
by its spec, each record's Kafka timestamp kept, an event-time range applied by role."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from app.commands import archive as A
from app.logic.event_range import EventRange
from app.settings import Settings

TIERS = {
    "name": "tiers",
    "events": {
        "topic": "t-page-views",
        "key": "user_id",
        "time": "event_time",
        "id": "id",
        "fields": {"id": "str", "user_id": "str", "page": "str", "event_time": "time"},
        "copy": ["user_id", "page", "event_time"],
    },
    "dimension": {
        "topic": "t-user-tiers",
        "key": "user_id",
        "time": "event_time",
        "fields": {"user_id": "str", "tier": "str", "event_time": "time"},
        "copy": ["tier"],
        "time_as": "tier_event_time",
    },
    "output": "t-tiered",
    "ticks": "t-tiers-ticks",
    "retention_ms": 86_400_000,
}


def with_joins_file(monkeypatch, tmp_path: Path) -> Settings:
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([TIERS]))
    s = Settings(joins_file=path)
    monkeypatch.setattr(A, "settings", s)
    return s


def test_a_user_spec_s_inputs_are_validated_by_its_fields(monkeypatch, tmp_path):
    s = with_joins_file(monkeypatch, tmp_path)
    models = A.input_models()
    assert {
        "t-page-views",
        "t-user-tiers",
        s.moods_topic,
        s.events_topic,
        s.ratings_topic,
        s.movies_topic,
        s.car_arrivals_topic,
        s.zones_topic,
    } <= set(models)
    tiers = models["t-user-tiers"]
    good = b'{"user_id": "u1", "tier": "gold", "event_time": 5, "extra": 1}'
    assert A.archive_value(tiers, b"u1", good) == {"user_id": "u1", "tier": "gold", "event_time": 5}
    assert A.archive_value(tiers, b"u1", b'{"user_id": "u1", "event_time": 5}') is None
    assert A.archive_value(tiers, b"u2", good) is None  # the key check
    assert (
        A.archive_value(tiers, b"u1", b'{"user_id": "u1", "tier": "gold", "event_time": "5"}')
        is None
    )  # strict types
    assert [c for c, _ in A.parquet_columns("t-tiered")] == [
        "id",
        "user_id",
        "page",
        "event_time",
        "tier",
        "tier_event_time",
        "revision",
        "previous_tier",
        "cause",
    ]


def test_a_dimension_s_tombstone_is_archived_as_its_end_an_event_s_is_left_out(
    monkeypatch, tmp_path
):
    s = with_joins_file(monkeypatch, tmp_path)
    models = A.input_models()
    tiers, views = models["t-user-tiers"], models["t-page-views"]
    # the key from the record key, the time from the Kafka timestamp, and _end
    assert A.archive_value(tiers, b"u1", None, timestamp=77) == {
        "user_id": "u1",
        "event_time": 77,
        "_end": True,
    }
    assert A.archive_value(tiers, None, None, timestamp=77) is None  # no key: the worker's too
    assert A.archive_value(views, b"u1", None, timestamp=77) is None  # an event's: a dead letter
    moods = models[s.moods_topic]
    assert A.archive_value(moods, b"ann", None, timestamp=5) == {
        "name": "ann",
        "event_time": 5,
        "_end": True,
    }
    assert A.parquet_columns("t-user-tiers")[-1] == ("_end", "bool")
    assert ("_end", "bool") not in (A.parquet_columns("t-page-views") or [])
    parquet = tmp_path / "tiers.parquet"
    psink = A.ParquetSink(parquet, A.parquet_columns("t-user-tiers"))
    psink.write(0, 1, {"user_id": "u1", "event_time": 77, "_end": True}, 77)
    psink.write(0, 2, {"user_id": "u1", "tier": "gold", "event_time": 78}, 78)
    psink.close()
    assert pq.read_table(parquet / "partition=0").column("_end").to_pylist() == [True, None]


def test_each_record_keeps_its_kafka_timestamp(tmp_path):
    stats = A.ArchiveStats()
    lines = tmp_path / "moods.jsonl"
    sink = A.JsonLinesSink(lines)
    model = A.input_models()[A.settings.moods_topic]
    value = b'{"name": "ann", "mood": "calm", "event_time": 7}'
    A._archive_one(sink, 0, 0, model, b"ann", value, stats, timestamp=1234)
    A._archive_one(sink, 0, 1, model, b"ann", value, stats, timestamp=None)  # none: no field
    sink.close()
    assert [json.loads(x) for x in lines.read_text().splitlines()] == [
        {"name": "ann", "mood": "calm", "event_time": 7, "_timestamp": 1234},
        {"name": "ann", "mood": "calm", "event_time": 7},
    ]

    parquet = tmp_path / "moods.parquet"
    psink = A.ParquetSink(parquet, A.parquet_columns(A.settings.moods_topic))
    psink.write(2, 40, {"name": "ann", "mood": "calm", "event_time": 7}, 1234)
    psink.write(2, 41, {"name": "ann", "mood": "sad", "event_time": 8}, None)
    psink.close()
    table = pq.read_table(parquet / "partition=2")
    assert table.column("_offset").to_pylist() == [40, 41]
    assert table.column("_timestamp").to_pylist() == [1234, None]


def test_a_range_keeps_what_the_joins_of_its_events_need(monkeypatch, tmp_path):
    with_joins_file(monkeypatch, tmp_path)
    r = EventRange(100, 200)
    views, tiers, out = (A.range_roles(t) for t in ("t-page-views", "t-user-tiers", "t-tiered"))
    assert [A.in_range(r, views, {"event_time": t}) for t in (50, 150, 250)] == [False, True, False]
    assert [A.in_range(r, tiers, {"event_time": t}) for t in (50, 150, 250)] == [
        True,
        True,
        False,
    ]  # versions before the range answer its first events
    assert [A.in_range(r, out, {"event_time": t}) for t in (50, 150)] == [False, True]
    assert A.in_range(r, A.range_roles("t-late"), {"event_time": 5})  # no role: whole
    late = {"record": {"event_time": 50}, "horizon": 60}  # an etj-late envelope
    assert not A.in_range(r, views, late)

    stats, lines = A.ArchiveStats(), tmp_path / "views.jsonl"
    sink = A.JsonLinesSink(lines)
    model = A.input_models()["t-page-views"]
    for t in (50, 150):
        value = json.dumps({"id": f"v{t}", "user_id": "u", "page": "/", "event_time": t})
        A._archive_one(sink, 0, t, model, b"u", value.encode(), stats, None, r, views)
    sink.close()
    assert (stats.written, stats.out_of_range) == (1, 1)


def test_a_foreign_key_spec_s_inputs_are_archived_flat_as_the_worker_reads_them(
    monkeypatch, tmp_path
):
    """A foreign-key spec's nested, ISO-timed left side is archived as the worker reads it
    (flat, epoch ms), so ``python -m app.batch ... --join NAME --left`` reads it as any spec's;
    its output gets typed Parquet columns."""
    from tests.unit.test_fk_spec import orders

    path = tmp_path / "joins.json"
    path.write_text(json.dumps([orders()]))
    monkeypatch.setattr(A, "settings", Settings(joins_file=path))
    left = A.input_models()["o"]
    value = (
        b'{"order_id": "o1", "customer": {"id": "c1"}, "amount": 2.5, "at": "2026-01-01T00:00:01Z"}'
    )
    assert A.archive_value(left, b"o1", value) == {
        "order_id": "o1",
        "customer_id": "c1",
        "amount": 2.5,
        "at": 1_767_225_601_000,
    }
    assert (
        A.archive_value(
            left, b"o1", b'{"order_id": "o1", "amount": 2.5, "at": "2026-01-01T00:00:01Z"}'
        )
        is None
    )
    assert A.parquet_columns("out") == [
        ("order_id", "string"),
        ("customer_id", "string"),
        ("amount", "double"),
        ("region", "string"),
        ("order_time", "int64"),
        ("region_time", "int64"),
        ("_key", "string"),  # a delete (a tombstone with its time in a header)
        ("_deleted_at", "int64"),
    ]
    # tombstones: either side's as an end row, the output's delete with its time
    assert A.archive_value(left, b"o1", None, timestamp=9) == {
        "order_id": "o1",
        "at": 9,
        "_end": True,
    }
    right = A.input_models()["c"]
    assert A.archive_value(right, b"c1", None, timestamp=8) == {
        "customer_id": "c1",
        right.time: 8,  # its time is the Kafka timestamp ($timestamp), a flat field
        "_end": True,
    }
    deleted = [("etj-deleted-at", b"30")]
    assert A.archive_value(None, b"o1", None, headers=deleted) == {
        "_key": "o1",
        "_deleted_at": 30,
    }
    assert A.archive_value(None, b"o1", None) is None  # a null value with no such header
    assert A.parquet_columns("o")[-1] == A.parquet_columns("c")[-1] == ("_end", "bool")


def test_a_join_output_read_as_another_join_events_is_archived_whole(monkeypatch, tmp_path):
    """A chain (app.joins.chains): the first join's output is archived as a revision log (every
    field, for ``reconcile --join tiers``), not as the second join's events, which the batch
    twin reads from it by their names."""
    from tests.unit.test_chains import chain

    path = tmp_path / "joins.json"
    path.write_text(json.dumps(chain()))
    monkeypatch.setattr(A, "settings", Settings(joins_file=path))
    models = A.input_models()
    assert "c-orders" in models and "c-products" in models
    assert "c-orders-tiered" not in models

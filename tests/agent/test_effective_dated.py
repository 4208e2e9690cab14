"""Effective-dated dimensions (issue Z): a side with its own ``max_future_ms`` takes versions
stamped ahead of ``ETJ_MAX_FUTURE_MS`` (a price list for next week). Such a version is joined at
its own time (it answers the events at or after it) and moves the stream time only as far as it
is due: at most ``ETJ_MAX_FUTURE_MS`` past its Kafka timestamp (or the clock), so the on-time
records behind it are not made late."""

from __future__ import annotations

import json
import time
from collections import namedtuple
from typing import Any

from app.faust_app import settings
from app.inputs.admission import Early
from app.inputs.inbox import Batch
from app.inputs.records import InvalidRecord
from app.joins.resolve import resolve
from app.logic.future_records import due_time
from app.loop.intake import parse_batch

DAY = 86_400_000
NOW = 1_767_225_600_000
Record = namedtuple("Record", "topic partition offset key value timestamp headers")


def prices(max_future_ms: int | None) -> Any:
    dimension: dict[str, Any] = {
        "topic": "prices",
        "key": "sku",
        "time": "valid_from",
        "fields": {"sku": "str", "price": "float", "valid_from": "time"},
        "copy": ["price"],
        "time_as": "price_from",
    }
    if max_future_ms is not None:
        dimension["max_future_ms"] = max_future_ms
    return resolve(
        {
            "name": "orders",
            "events": {
                "topic": "orders",
                "key": "sku",
                "time": "at",
                "id": "id",
                "fields": {"id": "str", "sku": "str", "at": "time"},
                "copy": ["sku", "at"],
            },
            "dimension": dimension,
            "output": "priced",
            "ticks": "order-ticks",
            "retention_ms": DAY,
        }
    )


def batch(*versions: tuple[int, int]) -> Batch:
    """Versions of sku a1 as (event time, Kafka timestamp), offsets 0, 1, ..."""
    return Batch(
        "prices",
        0,
        [
            Record(
                "prices",
                0,
                i,
                b"a1",
                json.dumps({"sku": "a1", "price": 1.5, "valid_from": t}).encode(),
                ts,
                (),
            )
            for i, (t, ts) in enumerate(versions)
        ],
        None,
        0,
    )


def outcome(spec: Any, tolerance: int | None, b: Batch) -> list[Any]:
    parse = spec.dimension.parser()

    def engine_parse(topic: str, key: Any, value: Any, ts: Any, headers: Any) -> Any:
        rec = parse(key, value, ts, headers)
        return rec, rec.valid_from

    return [
        (
            t,
            type(p).__name__,
            getattr(p, "due", None),
            str(p) if isinstance(p, InvalidRecord) else None,
        )
        for t, _, (_, _, p) in parse_batch("orders", engine_parse, b, True, tolerance)
    ]


def test_the_due_time_is_at_most_the_global_tolerance_past_the_reference():
    tol = 300_000
    assert due_time(NOW + 3 * DAY, NOW, NOW + DAY, tol) == NOW + tol  # its timestamp
    assert due_time(NOW + 3 * DAY, None, NOW, tol) == NOW + tol  # no timestamp: the clock
    assert due_time(NOW + 1000, NOW, NOW, tol) == NOW + 1000  # due: its own time
    # a replay months later: judged against its Kafka timestamp, as live
    assert due_time(NOW + 3 * DAY, NOW, NOW + 90 * DAY, tol) == NOW + tol


def test_a_side_with_its_own_tolerance_admits_versions_effective_later_due_at_the_global_one():
    now = int(time.time() * 1000)
    tol = settings.max_future_ms
    b = batch((now + 3 * DAY, now), (now + 8 * DAY, now), (now + 1000, now), (now - DAY, now))
    early, too_far, soon, past = outcome(prices(7 * DAY), 7 * DAY, b)
    assert early == (now + tol, "Early", now + tol, None)  # next week's price: in, due in 5 min
    assert too_far[:2] == (-1, "InvalidRecord") and "ms ahead of its Kafka timestamp" in too_far[3]
    assert "max_future_ms of" in too_far[3] and "ETJ_MAX_FUTURE_MS" not in too_far[3]
    assert "Early" not in (soon[1], past[1]) and "InvalidRecord" not in (soon[1], past[1])
    assert (soon[0], past[0]) == (now + 1000, now - DAY)  # within the global rule: as ever


def test_without_its_own_tolerance_a_version_effective_later_is_refused_as_before():
    now = int(time.time() * 1000)
    [got] = outcome(prices(None), None, batch((now + 3 * DAY, now)))
    assert got[:2] == (-1, "InvalidRecord")
    assert "ms ahead of its Kafka timestamp" in got[3] and "(ETJ_MAX_FUTURE_MS)" in got[3]


async def test_a_version_effective_later_answers_events_at_or_after_it_and_moves_no_stream_time(
    join_harness,
):
    """The movies join (inner, the version at or before a rating's time): a version stamped
    three days ahead, handed on as :class:`Early`, is stored at its time; the stream time moves
    only to its due time, a rating now joins the version in force now, one three days later the
    new version."""
    T = 1_767_225_600_000
    async with join_harness("movies") as h:
        spec = h.spec
        topic = spec.dimension.input

        def movie(title: str, t: int) -> bytes:
            return json.dumps({"movie_id": "m1", "title": title, "event_time": t}).encode()

        await h.dimension({"movie_id": "m1", "title": "Alien", "event_time": T})
        parse = spec.dimension.parser()
        cut = parse(b"m1", movie("Alien (cut)", T + 3 * DAY))
        h.engine.on_record(
            topic, 0, 100, b"m1", movie("Alien (cut)", T + 3 * DAY), Early(cut, T + 300_000)
        )
        assert h.engine.state.stream_time(0) == T + 300_000  # not three days ahead
        for rid, t in (("r1", T + 3_600_000), ("r2", T + 3 * DAY + 1)):
            await h.event(
                {"id": rid, "movie_id": "m1", "user_id": "u", "rating": 4.0, "event_time": t}
            )
        titles = {o["id"]: o["title"] for o in h.outputs()}
        assert titles == {"r1": "Alien", "r2": "Alien (cut)"}  # r1 was not late either

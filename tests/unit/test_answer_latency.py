"""The answer latency (``etj_answer_latency_seconds``): each input record counted once, from its
own batch's arrival to the broker taking what its range made (app.loop.latency), in a histogram
that takes a batch's records as one observation (app.metrics.WeightedHistogram)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from app import metrics
from app.inputs.inbox import Batch
from app.loop.latency import ArrivalTimes


def batch(topic: str, partition: int, first: int, n: int, arrived: float) -> Batch:
    records = [SimpleNamespace(offset=first + i) for i in range(n)]
    return Batch(topic, partition, records, None, 1, arrived=arrived)


@pytest.fixture
def seen(monkeypatch) -> list[tuple[tuple[str, ...], float, int]]:
    out: list[tuple[tuple[str, ...], float, int]] = []
    monkeypatch.setattr(
        metrics.answer_latency, "observe", lambda labels, v, n=1: out.append((labels, v, n))
    )
    return out


def test_each_record_counts_once_from_its_own_batch(seen):
    times = ArrivalTimes("moods", ticks="ticks")
    times.took([batch("events", 0, 100, 10, arrived=1.0), batch("ticks", 0, 0, 3, arrived=1.0)])
    times.took([batch("events", 0, 110, 5, arrived=2.0), batch("moods", 1, 7, 2, arrived=2.5)])
    # flow control let go 100..104 first (the rest of the first batch waits for the moods)
    times.answered({("events", 0): [100, 105]}, now=3.0)
    assert seen == [(("moods",), 2.0, 5)]
    times.answered({("events", 0): [105, 112], ("moods", 1): [7, 9]}, now=4.0)
    assert seen[1:] == [(("moods",), 3.0, 5), (("moods",), 2.0, 2), (("moods",), 1.5, 2)]
    times.answered({("events", 0): [112, 115]}, now=5.0)
    assert seen[4:] == [(("moods",), 3.0, 3)]
    assert sum(n for *_, n in seen) == 17  # every event and mood once; ticks never


def test_a_rebalance_forgets_what_was_taken(seen):
    times = ArrivalTimes("moods", ticks=None)
    times.took([batch("events", 0, 0, 4, arrived=1.0)])
    times.clear()
    times.answered({("events", 0): [0, 4]}, now=2.0)
    assert seen == []


def test_the_histogram_is_exposed_as_prometheus_reads_one():
    registry = CollectorRegistry()
    h = metrics.WeightedHistogram("x_seconds", "x", ["join"], (0.1, 1.0), registry=registry)
    h.observe(("a",), 0.1, 3)  # on an edge: counted in that bucket (le, "less or equal")
    h.observe(("a",), 0.5, 2)
    h.observe(("a",), 7.0)
    text = generate_latest(registry).decode()
    assert 'x_seconds_bucket{join="a",le="0.1"} 3.0' in text
    assert 'x_seconds_bucket{join="a",le="1.0"} 5.0' in text
    assert 'x_seconds_bucket{join="a",le="+Inf"} 6.0' in text
    assert 'x_seconds_count{join="a"} 6.0' in text
    assert 'x_seconds_sum{join="a"} 8.3' in text

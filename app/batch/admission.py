"""Which archived input records a batch run joins: the rule on records from the future, then an
event-time range. Pure DataFrame -> DataFrame transforms (no I/O), Spark's twins of
:mod:`app.logic.future_records` and :mod:`app.logic.event_range`; the tests hold each to its pure rule.

The future rule needs each record's Kafka timestamp: the ``_timestamp`` column
:func:`app.batch.archives.read_archive` gives (null when the archive did not keep it, or the
record had none: then only the wall clock ``now_ms`` bounds it, as in the stream).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.logic.event_range import EventRange, Role

__all__ = ["Admitted", "reference_time", "from_the_future", "admit", "in_range"]


def reference_time(timestamp: Column, now_ms: int) -> Column:
    """:func:`app.logic.future_records.reference_time`: min(timestamp, now), now without one (a
    negative timestamp is none, :func:`app.logic.future_records.kafka_timestamp`)."""
    now = F.lit(now_ms).cast("bigint")
    ts = F.when(timestamp >= 0, timestamp)
    return F.least(F.coalesce(ts, now), now)


def from_the_future(
    event_time: Column, timestamp: Column, now_ms: int, tolerance_ms: int
) -> Column:
    """:func:`app.logic.future_records.from_the_future` as a column: true when the record is refused."""
    return event_time > reference_time(timestamp, now_ms) + F.lit(tolerance_ms).cast("bigint")


@dataclass
class Admitted:
    """One input's records after the future rule; ``refused``: those it refused (lazy)."""

    records: DataFrame
    refused: DataFrame


def admit(df: DataFrame, time: str, now_ms: int, tolerance_ms: int) -> Admitted:
    """Split ``df`` (with ``_timestamp``) by the rule on records from the future."""
    future = from_the_future(F.col(time), F.col("_timestamp"), now_ms, tolerance_ms)
    return Admitted(df.where(~future), df.where(future))


def in_range(df: DataFrame, r: EventRange, role: Role, time: str | None) -> DataFrame:
    """The records of one input (or output) that the joins of events in ``r`` need:
    :func:`app.logic.event_range.needs` as a filter. ``time``: the event-time field (None: the
    output does not carry it; everything is kept)."""
    if not r.bounded or time is None or role == "dimension-earliest":
        return df
    t = F.col(time)
    if role == "dimension-before":
        return df if r.end is None else df.where(t < r.end)
    cond = F.lit(True)
    if r.start is not None:
        cond = cond & (t >= r.start)
    if r.end is not None:
        cond = cond & (t < r.end)
    return df.where(cond)

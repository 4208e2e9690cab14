"""Records from the future: the one rule that refuses them, for the stream and the batch twin.

A record stamped far ahead of now would move stream time ahead with it (stream time is the
greatest event time seen and never goes back): every on-time record behind it would look late,
and state would be purged early. So a record whose event time is further ahead than a tolerance
is refused (dead letter, counted) and never moves stream time:

    refused  when  event_time > reference + tolerance_ms
    reference = min(the record's Kafka timestamp, the wall clock now)
                the wall clock now, when the record has no timestamp

Why the minimum: for a record whose Kafka timestamp is not ahead of the clock, the reference is
the timestamp itself, a property of the record: the stream (deciding when it reads the record)
and the batch twin (deciding months later, over an archive that kept the timestamp) decide
alike. A producer whose own clock runs ahead stamps its records ahead too; the wall clock then
bounds the reference, so the stream still catches its records live. A record without a
timestamp (an old message format) can only be judged against the clock, so the stream and a
batch run may disagree about it; the archive says which records had none.

Pure: no clock is read here. The caller passes ``now_ms`` (the stream: its wall clock when it
handles the record; the batch twin: when its run started, or ``--now``). Shapes: epoch ms ints.
"""

from __future__ import annotations

__all__ = [
    "NO_TIMESTAMP",
    "due_time",
    "kafka_timestamp",
    "timestamp_from_seconds",
    "reference_time",
    "from_the_future",
    "refusal_reason",
]

#: what Kafka clients report for a record without a timestamp (message format v0)
NO_TIMESTAMP = -1


def kafka_timestamp(raw: int | None) -> int | None:
    """A client's record timestamp as the rule reads it: None when the record has none."""
    if raw is None or raw < 0:
        return None
    return raw


def timestamp_from_seconds(seconds: float | None) -> int | None:
    """A Faust ``Message.timestamp`` (seconds as a float: its aiokafka driver divides the
    record's milliseconds by 1000) back in epoch ms, as the archive keeps it; None: none."""
    if seconds is None:
        return None
    return kafka_timestamp(round(seconds * 1000))


def reference_time(timestamp_ms: int | None, now_ms: int) -> int:
    """The time a record's event time is held against: min(timestamp, now), else now."""
    if timestamp_ms is None:
        return now_ms
    return min(timestamp_ms, now_ms)


def from_the_future(
    event_time: int, timestamp_ms: int | None, now_ms: int, tolerance_ms: int
) -> bool:
    """Is the record refused? ``timestamp_ms``: its Kafka timestamp (None: it has none)."""
    return event_time > reference_time(timestamp_ms, now_ms) + tolerance_ms


def refusal_reason(
    event_time: int,
    timestamp_ms: int | None,
    now_ms: int,
    tolerance_ms: int,
    bound: str = "ETJ_MAX_FUTURE_MS",
) -> str:
    """The dead letter's ``error`` for a refused record: what it was held against, by how
    much it is ahead, and the setting that says how far is accepted (``bound``: a spec side's
    own ``max_future_ms`` names its spec and side)."""
    reference = reference_time(timestamp_ms, now_ms)
    against = (
        "its Kafka timestamp"
        if timestamp_ms is not None and timestamp_ms <= now_ms
        else "the wall clock"
    )
    return (
        f"event time {event_time} is {event_time - reference} ms ahead of {against} "
        f"({reference}); at most {tolerance_ms} ms ahead is accepted ({bound})"
    )


def due_time(event_time: int, timestamp_ms: int | None, now_ms: int, tolerance_ms: int) -> int:
    """The stream time a record accepted ahead of the rule may move its partition to (a spec
    side with its own ``max_future_ms``: versions effective later, a price list for next
    week): its event time once it is **due**, that is at most ``tolerance_ms`` (the global
    ``ETJ_MAX_FUTURE_MS``) ahead of its reference time; before, that bound. So such a version
    is stored at its own time, answers the events at or after it, and moves stream time no
    further than any record accepted by the global rule could: the on-time records behind it
    are not made late, state is not purged early. Against its Kafka timestamp (when that is
    not ahead of the clock), so a replay moves stream time the same way."""
    return min(event_time, reference_time(timestamp_ms, now_ms) + tolerance_ms)

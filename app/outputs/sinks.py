"""What leaves the worker besides revisions and dead letters (:mod:`app.loop.dead_letters`): late
records (docs/joins/topics.md).

A late record keeps enough of the original record to replay it: the parsed record with its
horizon.
"""

from __future__ import annotations

import json
from typing import Any


def late_record(
    topic: str,
    partition: int,
    offset: int,
    record: dict[str, Any],
    event_time: int,
    stream_time: int,
    horizon: int,
    join: str | None = None,
) -> bytes:
    """The late-topic value: the record and why it was too late for the stream; ``join``:
    whose stream (a topic several joins read may be late for each of them: one late record
    per join, each naming it)."""
    return json.dumps(
        {
            "topic": topic,
            "join": join,
            "partition": partition,
            "offset": offset,
            "record": record,
            "event_time": event_time,
            "stream_time": stream_time,
            "horizon": horizon,
            "reason": f"event_time {event_time} is older than the partition's retention horizon "
            f"{horizon} (stream time {stream_time}); the batch backfill can apply it",
        }
    ).encode()

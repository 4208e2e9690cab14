"""What leaves the worker besides revisions: dead letters and late records (DESIGN §1).

Both keep enough of the original record to replay it: dead letters the original bytes (text, or
base64 when not UTF-8) with the source position, late records the parsed record with its horizon.
"""

from __future__ import annotations

import base64
import json
from typing import Any


def dead_letter(topic: str, partition: int, offset: int, key: bytes | None,
                value: bytes | None, error: str) -> bytes:
    """The dead-letter value: original bytes, where they came from and why they were refused."""
    encoding, text = _as_text(value)
    return json.dumps({
        "topic": topic, "partition": partition, "offset": offset,
        "key": None if key is None else key.decode("utf-8", errors="replace"),
        "value": text, "value_encoding": encoding, "error": error,
    }).encode()


def late_record(topic: str, partition: int, offset: int, record: dict[str, Any],
                event_time: int, stream_time: int, horizon: int) -> bytes:
    """The late-topic value: the record and why it was too late for the stream."""
    return json.dumps({
        "topic": topic, "partition": partition, "offset": offset, "record": record,
        "event_time": event_time, "stream_time": stream_time, "horizon": horizon,
        "reason": f"event_time {event_time} is older than the partition's retention horizon "
                  f"{horizon} (stream time {stream_time}); the batch backfill can apply it",
    }).encode()


def _as_text(value: bytes | None) -> tuple[str, str | None]:
    if value is None:
        return "null", None
    try:
        return "text", value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64", base64.b64encode(value).decode("ascii")

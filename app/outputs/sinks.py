"""What leaves the worker besides revisions: dead letters and late records (docs/joins/topics.md).

Both keep enough of the original record to replay it: dead letters the original bytes (text, or
base64 when not UTF-8) with the source position, late records the parsed record with its horizon.

A dead letter must always fit in one Kafka record, or sending it fails and the record it stands
for is neither joined nor dead-lettered: originals over ``MAX_KEPT_BYTES`` are cut there, and
the dead letter says so (``value_truncated``, the full ``value_size`` and its ``value_sha256``);
the source position still finds the whole original in the input topic while it is retained.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

#: bytes of an original value (and key) a dead letter keeps; JSON escaping grows text up to 6x
#: and base64 by 4/3, so a dead letter stays well under Kafka's default 1 MB record limit
MAX_KEPT_BYTES = 64 * 1024


def dead_letter(
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, error: str
) -> bytes:
    """The dead-letter value: original bytes, where they came from and why they were refused."""
    encoding, text = _as_text(value)
    kept = value if value is None or len(value) <= MAX_KEPT_BYTES else value[:MAX_KEPT_BYTES]
    if kept is not value and kept is not None:  # a cut inside a UTF-8 character drops it
        text = (
            kept.decode("utf-8", errors="ignore")
            if encoding == "text"
            else base64.b64encode(kept).decode("ascii")
        )
    out: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": None if key is None else key[:MAX_KEPT_BYTES].decode("utf-8", errors="replace"),
        "value": text,
        "value_encoding": encoding,
        "error": error,
    }
    if value is not None and kept is not value:
        out.update(
            value_truncated=True,
            value_size=len(value),
            value_sha256=hashlib.sha256(value).hexdigest(),
        )
    return json.dumps(out).encode()


def late_record(
    topic: str,
    partition: int,
    offset: int,
    record: dict[str, Any],
    event_time: int,
    stream_time: int,
    horizon: int,
) -> bytes:
    """The late-topic value: the record and why it was too late for the stream."""
    return json.dumps(
        {
            "topic": topic,
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


def _as_text(value: bytes | None) -> tuple[str, str | None]:
    if value is None:
        return "null", None
    try:
        return "text", value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64", base64.b64encode(value).decode("ascii")

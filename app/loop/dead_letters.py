"""Dead letters: an input record that cannot be joined, or whose output the broker refuses for
good, goes to the dead-letter topic with where it came from and why (docs/joins/topics.md).

:func:`dead_letter_value`: what a dead letter holds, enough of the original record to replay
it: the original bytes (text, or base64 when not UTF-8) with the source position, its Kafka
timestamp and headers. A dead letter must always fit in one Kafka record, or sending it fails
and the record it stands for is neither joined nor dead-lettered: originals over
``MAX_KEPT_BYTES`` are cut there, and the dead letter says so (``value_truncated``, the full
``value_size`` and its ``value_sha256``; headers over it are left out, ``headers_truncated``);
the source position still finds the whole original in the input topic while it is retained.
:func:`read_dead_letter` reads one back (``faust -A app.main dead-letters replay``,
:mod:`app.commands.dead_letters`).

The timestamp and headers: an engine is handed a record's key and value, not the record
(:meth:`app.loop.types.Engine.on_record`), so the loop names the record it hands over
(:func:`handling`) and a dead letter made for that record takes them from it.

:func:`dead_letter`: a record's dead letter as an output of its batch, counted once per join.

:func:`dead_letter_refused`: poison pills. An output the broker refuses for a reason that will
not change (over the producer's max request size, a topic's ``max.message.bytes``, an invalid
record) would fail the worker on every restart. Each refused output is sent alone first (the
refusal may be a neighbour's in the same producer batch); the input record whose output is
refused again goes to the dead letters, once, naming the output, and the broker has the dead
letter before the record is acked. A refused dead letter fails stop: there is nowhere else to
put the record.

Here and not in :mod:`app.outputs` (where the late records' values are,
:mod:`app.outputs.sinks`): a dead letter is a loop's :class:`~app.loop.types.Out`, and the
outputs sit below the loop.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app import metrics
from app.loop.types import Out, Source
from app.outputs import delivery

log = logging.getLogger(__name__)

__all__ = [
    "MAX_KEPT_BYTES",
    "DeadLetter",
    "dead_letter",
    "dead_letter_refused",
    "dead_letter_value",
    "handling",
    "read_dead_letter",
]

#: bytes of an original value (and key) a dead letter keeps; JSON escaping grows text up to 6x
#: and base64 by 4/3, so a dead letter stays well under Kafka's default 1 MB record limit
MAX_KEPT_BYTES = 64 * 1024


def dead_letter_value(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    error: str,
    timestamp: int | None = None,
    headers: Sequence[tuple[str, bytes | None]] | None = None,
    join: str | None = None,
) -> bytes:
    """The dead-letter value: original bytes, where they came from and why they were refused;
    the original's Kafka ``timestamp`` (epoch ms) and ``headers`` (None: unknown); ``join``:
    the join that refused it (a topic several joins read may be refused by each of them, for
    reasons of its own: one dead letter per join, each naming it)."""
    encoding, text = _as_text(value)
    # a key as the value is: text, or base64 when not UTF-8 (a Long key's 8 bytes, an Avro
    # key's framing): a replay sends it back exact
    key_encoding, key_text = _as_text(None if key is None else key[:MAX_KEPT_BYTES])
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
        "key": key_text,
        "key_encoding": key_encoding,
        "value": text,
        "value_encoding": encoding,
        "error": error,
        "join": join,
        "timestamp": timestamp,
        "headers": None if headers is None else _headers(headers),
    }
    if value is not None and kept is not value:
        out.update(
            value_truncated=True,
            value_size=len(value),
            value_sha256=hashlib.sha256(value).hexdigest(),
        )
    if key is not None and len(key) > MAX_KEPT_BYTES:
        out["key_truncated"] = True
    if headers is not None and sum(len(k) + len(v or b"") for k, v in headers) > MAX_KEPT_BYTES:
        out.update(headers=None, headers_truncated=True)
    return json.dumps(out).encode()


def _headers(headers: Sequence[tuple[str, bytes | None]]) -> list[dict[str, Any]]:
    out = []
    for name, raw in headers:
        encoding, text = _as_text(raw)
        out.append({"key": name, "value": text, "value_encoding": encoding})
    return out


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead letter read back (:func:`read_dead_letter`): the original record as it kept it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    error: str
    timestamp: int | None
    #: None: unknown (a dead letter written before they were kept, or too large to keep)
    headers: list[tuple[str, bytes | None]] | None
    #: the key, value and headers are the original's bytes (not cut, not re-encoded); False:
    #: only the original in its input topic is
    exact: bool
    #: why not exact, for a person ("" when exact)
    inexact: str = ""
    #: the whole original value's SHA-256 (hex), when the dead letter keeps it cut
    value_sha256: str | None = None
    #: the join that refused it (None: a dead letter written before it was kept)
    join: str | None = None


def _bytes(text: str | None, encoding: str) -> bytes | None:
    if text is None or encoding == "null":
        return None
    return base64.b64decode(text) if encoding == "base64" else text.encode("utf-8")


def read_dead_letter(raw: bytes) -> DeadLetter:
    """A dead letter's value (:func:`dead_letter_value`) back as the record it stands for;
    raises ``ValueError`` for a value that is not one."""
    d = json.loads(raw)
    if not isinstance(d, dict) or not {"topic", "partition", "offset", "error"} <= d.keys():
        raise ValueError("not a dead letter (no topic, partition, offset and error)")
    key = d.get("key")
    headers = d.get("headers")
    why = (
        "its value was cut at 64 KiB"
        if d.get("value_truncated")
        else "its headers were too large to keep"
        if d.get("headers_truncated")
        else "it has no timestamp (written before dead letters kept one)"
        if d.get("timestamp") is None
        else "its headers are unknown"
        if headers is None
        else "its key is not UTF-8 (kept with replacement characters)"
        if key is not None and "key_encoding" not in d and "\ufffd" in key
        else "its key was cut at 64 KiB"
        if d.get("key_truncated")
        else ""
    )
    return DeadLetter(
        d["topic"],
        d["partition"],
        d["offset"],
        None if key is None else _bytes(key, d.get("key_encoding", "text")),
        _bytes(d.get("value"), d.get("value_encoding", "text")),
        d["error"],
        d.get("timestamp"),
        None
        if headers is None
        else [(h["key"], _bytes(h.get("value"), h.get("value_encoding", "text"))) for h in headers],
        not why,
        why,
        d.get("value_sha256"),
        d.get("join"),
    )


def _as_text(value: bytes | None) -> tuple[str, str | None]:
    if value is None:
        return "null", None
    try:
        return "text", value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64", base64.b64encode(value).decode("ascii")


#: (join, input topic) -> its dead-letter counter
_DEAD_LETTERS: dict[tuple[str, str], Any] = {}

#: the input record a loop is handing to its engine (:func:`handling`): a one-item list, so
#: that setting it is one store per record
_HANDLING: list[Any] = [None]


def handling(record: Any) -> None:
    """The loop hands ``record`` (a consumer record) to its engine now: a dead letter made for
    it (the same topic, partition and offset) carries its timestamp and headers. The loops
    share one event loop and hand a record over without awaiting, so one slot serves them all."""
    _HANDLING[0] = record


def dead_letter(
    join: str,
    dead_letters: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    error: str,
    record: Any = None,
) -> Out:
    """The dead letter of an input record that cannot be joined (counted once, per join);
    ``record``: the consumer record (its timestamp and headers), else the one the loop is
    handing over (:func:`handling`) when it is this one."""
    counter = _DEAD_LETTERS.get((join, topic))
    if counter is None:  # prometheus' labels() costs ~3 µs: once per (join, topic)
        counter = _DEAD_LETTERS[(join, topic)] = metrics.dead_letters.labels(join, topic)
    counter.inc()
    rec = _HANDLING[0] if record is None else record
    if rec is not None and (rec.offset, rec.partition, rec.topic) == (offset, partition, topic):
        timestamp = getattr(rec, "timestamp", None)
        headers = _header_list(getattr(rec, "headers", None))
    else:
        timestamp = headers = None
    return Out(
        dead_letters,
        key,
        dead_letter_value(topic, partition, offset, key, value, error, timestamp, headers, join),
    )


def _header_list(headers: Any) -> list[tuple[str, bytes | None]]:
    return [] if not headers else [(k, v) for k, v in headers]


async def dead_letter_refused(
    app: Any,
    join: str,
    dead_letters: str,
    refused: list[tuple[int, BaseException]],
    outs: Sequence[Out],
    sources: Sequence[Source],
    ends: Sequence[int],
) -> None:
    """Outputs refused for good (index into ``outs``, error): each sent alone again; the
    records whose outputs are refused again go to the dead letters (module docstring).
    ``ends[i]``: len(outs) after ``sources[i]`` was handled."""
    letters = []
    dead: set[int] = set()  # indices into sources
    for i, exc in refused:
        out = outs[i]
        if out.topic == dead_letters:
            delivery.fail_stop(f"a dead letter was refused by the broker: {exc!r}")
        source = bisect_right(ends, i)  # the record whose outputs hold outs[i]
        if source in dead:
            continue
        if out.again:  # its own record was dead-lettered when it was first refused
            log.warning(
                "join %s: the broker refused a re-emitted output again (%r): output to "
                "%s, key %s; not sent",
                join,
                exc,
                out.topic,
                _text(out.key),
            )
            continue
        try:
            await (
                await delivery.send_alone(
                    app, out.topic, out.key, out.value, out.timestamp, out.headers
                )
            )
            continue  # delivered alone: the refusal was a batch neighbour's
        except Exception as again:
            if not delivery.refused_for_good(again):  # send_alone failed stop already
                raise
            exc = again
        dead.add(source)
        src = sources[source]
        log.warning(
            "join %s: the broker refused an output of %s[%s]@%s for good (%r); the "
            "record goes to the dead letters",
            join,
            src.topic,
            src.partition,
            src.offset,
            exc,
        )
        letter = dead_letter(
            join,
            dead_letters,
            src.topic,
            src.partition,
            src.offset,
            src.key,
            src.value,
            f"output refused by the broker: {exc!r} (output to "
            f"{out.topic}, key {_text(out.key)}, {len(out.value or b'')} bytes)",
            record=src,
        )
        letters.append(await delivery.send_direct(app, dead_letters, letter.key, letter.value))
    for fut in letters:
        await fut  # a failure here failed stop already (send_direct's callback)


def _text(key: bytes | None) -> str:
    """An output key for a person: its text, cut at 200 characters."""
    return "null" if key is None else repr(key[:200].decode("utf-8", errors="replace"))

"""Event times as a spec side writes them (``time_format``: :data:`TIME_FORMATS`), converted to
epoch ms, and the Kafka record timestamp as a side's time (:data:`KAFKA_TIMESTAMP`). A time that
cannot be read raises :class:`~app.inputs.records.InvalidRecord` saying why (a dead letter, or a
spec's ``start`` refused).
"""

from __future__ import annotations

import math
import re
from typing import Any

from app.inputs.records import InvalidRecord

#: the event-time formats a spec side may declare (``time_format``)
TIME_FORMATS = ("epoch_ms", "epoch_s", "epoch_us", "epoch_ns", "iso8601")
#: the time source that reads the Kafka record timestamp instead of a field
KAFKA_TIMESTAMP = "$timestamp"

#: ISO-8601 as etj reads it: date, ``T`` (or ``t``, or a space), time to the second, an
#: optional fraction (truncated to the millisecond), and a zone that is required (a time without
#: one means a different instant in every time zone): ``Z`` or ``z``, ``±HH:MM``, ``±HHMM`` or
#: ``±HH``
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2})(?::?(\d{2}))?)"
)
_ISO_NO_ZONE = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?")
#: an epoch time written as text: an integer or a decimal number (no exponent, no sign)
_EPOCH_TEXT = re.compile(r"\d{1,30}(?:\.\d{1,30})?")
#: epoch units per millisecond of the epoch formats (epoch_s: milliseconds per unit, below)
_PER_MS = {"epoch_ms": 1, "epoch_us": 1_000, "epoch_ns": 1_000_000}


#: the proleptic Gregorian ordinal of 1970-01-01 (``datetime.date(1970, 1, 1).toordinal()``)
_EPOCH_DAY = 719_163


def iso_to_ms(text: str) -> int:
    """Epoch ms of an ISO-8601 time with a zone (the fraction truncated to the ms); raises
    :class:`InvalidRecord` saying why not.

    A time whose every part is in range is counted in integers (a day's ordinal, seconds, the
    zone's offset): ~1 µs, where building an aware ``datetime`` for it was ~3 µs a record. Any
    other goes the ``datetime`` way, whose error names what is wrong."""
    import datetime as dt

    m = _ISO.fullmatch(text)
    if m is not None:
        y, mo, d, h, mi, s, frac, z, sign, oh, om = m.groups()
        hour, minute, second = int(h), int(mi), int(s)
        off_h, off_m = (0, 0) if z else (int(oh), int(om or 0))
        if hour < 24 and minute < 60 and second < 60 and off_h < 24 and off_m < 60:
            try:
                days = dt.date(int(y), int(mo), int(d)).toordinal() - _EPOCH_DAY
            except ValueError:
                pass  # the datetime way says why
            else:
                offset = 0 if z else (1 if sign == "+" else -1) * (off_h * 3600 + off_m * 60)
                seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
                return seconds * 1000 + (int(frac[:3].ljust(3, "0")) if frac else 0)
    if m is None:
        if _ISO_NO_ZONE.fullmatch(text):
            raise InvalidRecord(
                f"{text[:60]!r} has no time zone (add 'Z' or an offset such as "
                "'+02:00'): it would be a different instant in every zone"
            )
        raise InvalidRecord(
            f"{text[:60]!r} is not an ISO-8601 time (YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM|±HHMM|±HH))"
        )
    y, mo, d, h, mi, s, frac, z, sign, oh, om = m.groups()
    try:
        zone: dt.timedelta = (
            dt.timedelta(0)
            if z
            else (1 if sign == "+" else -1) * dt.timedelta(hours=int(oh), minutes=int(om or 0))
        )
        when = dt.datetime(
            int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=dt.timezone(zone)
        )
    except ValueError as exc:
        raise InvalidRecord(f"{text[:60]!r} is not a valid time: {exc}") from None
    ms = int(when.timestamp()) * 1000 + int((frac or "0")[:3].ljust(3, "0"))
    return ms


def convert_time(raw: Any, time_format: str) -> Any:
    """The event time in epoch ms of a field written in ``time_format``; a value that is not
    one is returned as it is (the flat model's ``time`` check then refuses it by type), and
    :class:`InvalidRecord` is raised for one that has the type but not a time's form.

    The rules (the batch twin's archive applies the same function): an epoch format reads an
    int, a finite float or the text of one (``"1767225600.5"``: digits, an optional fraction,
    as a header carries it); ``epoch_s``: ``floor(s * 1000 + 0.5)``; ``epoch_ms``,
    ``epoch_us``, ``epoch_ns``: the milliseconds, the fraction of one truncated
    (``us // 1000``, ``ns // 1_000_000``); a negative epoch is refused before converting;
    ``iso8601``: :func:`iso_to_ms`. (A side whose ``time_format`` is left out reads an
    integer of epoch ms and nothing else: the input rules; this is not called for it.)"""
    if raw is None or isinstance(raw, bool):
        return raw
    if time_format == "iso8601":
        return iso_to_ms(raw) if isinstance(raw, str) else raw
    if isinstance(raw, str):
        if not _EPOCH_TEXT.fullmatch(raw):
            raise InvalidRecord(
                f"{raw[:60]!r} is not an epoch time ({time_format}: digits, an optional fraction)"
            )
        whole, _, frac = raw.partition(".")
        if time_format == "epoch_s":
            return math.floor(int(whole) * 1000 + float(f"0.{frac or 0}") * 1000 + 0.5)
        per_ms = _PER_MS[time_format]
        return int(whole) // per_ms  # the fraction of a unit is below a millisecond
    if not isinstance(raw, (int, float)):
        return raw
    if not math.isfinite(raw) or raw < 0:
        raise InvalidRecord(f"{raw!r} is not an epoch time ({time_format}: negative or not finite)")
    if time_format == "epoch_s":
        return math.floor(raw * 1000 + 0.5)
    per_ms = _PER_MS[time_format]
    if isinstance(raw, int):
        return raw // per_ms
    return math.floor(raw / per_ms)

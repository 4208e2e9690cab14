"""Byte keys of a join's rows, ordered so that what the engine looks for is one range.

All three kinds live in the join's one ordered table (``<name>-joins``), told apart by their
first byte; only ``J`` rows go to the changelog, ``I`` and ``X`` are indexes derived from them
(written with them, rebuilt from them on recovery: :class:`app.joins.joins_table.JoinsTable`).

join   J ++ u32be(len(key)) ++ key ++ u64be(event_time) ++ join id  -> the join's row
       one key's joins are one prefix, in event-time order: the events a dimension version
       can change (between it and the next version) are one range
id     I ++ u32be(len(key)) ++ key ++ join id                          -> the join's event time
       finds a join by its id (a duplicate, or an event re-sent with another time)
expiry X ++ u32be(partition) ++ u64be(bucket) ++ u32be(len(key)) ++ key   -> 1
       the keys with joins in each time bucket of a partition (``bucket``: the first event time
       of a :data:`BUCKET_MS` bucket), in time order: "keys with joins older than the horizon"
       is one range, and an event writes its bucket's row only once per key and bucket

held   H ++ u32be(partition) ++ u64be(event_time) ++ u32be(len(key)) ++ key ++ join id -> 1
       the joins a bounded hold keeps waiting (``hold_ms``: revision 0), in time order per
       partition: "the holds that ended by stream time S" is one range, its first row the
       next hold to end; derived like ``I`` and ``X``, only for a spec with a hold
released R ++ (as ``H``) -> the source of the release    (the same layout, kind ``R``)
       a hold that ended, until the revision that answered it is known delivered: a crash
       between the changelog and the output loses that revision, and the record that moved
       the stream time is no record of the join's key (its re-delivery re-emits nothing of it)

version V ++ u32be(len(key)) ++ key ++ u64be(event_time) ++ digest(values) -> [event_time, *values]
       one row per dimension version (a mood, a movie's version): one key's versions are one
       prefix in event-time order, so "the version before t" is one bounded reverse read and
       "the next version time after t" one forward read; a batch writes the versions it
       changes, never a row that grows with the key's history. ``digest`` (8 bytes of
       BLAKE2b of the values' JSON) tells apart versions at the same time (ties): their
       order among themselves is not the tie rule's, so a time's versions are read together
       and sorted (:mod:`app.joins.state`)

The length prefix keeps a key from being a prefix of another (``"ab"`` vs ``"abc"``). Event times
are >= 0 (app.inputs.records), so plain unsigned big-endian bytes sort like the numbers. Rows of the
layout before this one began with the length prefix (a ``0x00`` byte): :func:`is_join_row`
tells them apart.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import orjson

from app.state.ordered_keys import prefix_end

__all__ = [
    "BUCKET_MS",
    "HELD",
    "RELEASED",
    "held_key",
    "held_range",
    "split_held_key",
    "ID",
    "JOIN",
    "VERSION",
    "version_key",
    "version_range",
    "bucket",
    "key_group",
    "expiry_key",
    "expiry_range",
    "id_key",
    "is_join_row",
    "join_key",
    "join_range",
    "split_expiry_key",
    "split_join_key",
]

JOIN, ID, EXPIRY, VERSION, HELD, RELEASED = b"J", b"I", b"X", b"V", b"H", b"R"
#: the width of an expiry bucket, ~17.5 minutes: a key's joins of one bucket share one
#: ``X`` row (a fixed width: the rows stay valid whatever the retention)
BUCKET_MS = 1 << 20
_U32 = 4
_U64 = 8
_MAX_TIME = (1 << 64) - 1


@lru_cache(maxsize=1 << 16)
def _key(key: str) -> bytes:
    raw = key.encode("utf-8")
    return len(raw).to_bytes(_U32, "big") + raw


def join_key(key: str, event_time: int, jid: str) -> bytes:
    return JOIN + _key(key) + event_time.to_bytes(_U64, "big") + jid.encode("utf-8")


def join_range(key: str, start: int | None, end: int | None) -> tuple[bytes, bytes]:
    """[lo, hi) of the join keys of ``key`` with ``start <= event_time < end`` (None: open)."""
    prefix = JOIN + _key(key)
    lo = prefix + max(start or 0, 0).to_bytes(_U64, "big")
    if end is None or end > _MAX_TIME:
        return lo, prefix_end(prefix)  # type: ignore[return-value]  # (never all 0xff: J...)
    return lo, prefix + max(end, 0).to_bytes(_U64, "big")


def split_join_key(raw: bytes) -> tuple[str, int, str]:
    """(key, event time, join id) of a :func:`join_key`."""
    n = int.from_bytes(raw[1 : 1 + _U32], "big")
    at = 1 + _U32 + n
    return (
        raw[1 + _U32 : at].decode("utf-8"),
        int.from_bytes(raw[at : at + _U64], "big"),
        raw[at + _U64 :].decode("utf-8"),
    )


def key_group(raw: bytes) -> bytes:
    """The first bytes every row of one key shares (kind, length, key): ``J`` rows of one key
    are scanned together."""
    return raw[: 5 + int.from_bytes(raw[1:5], "big")]


def is_join_row(raw: bytes) -> bool:
    return raw[:1] == JOIN


def id_key(key: str, jid: str) -> bytes:
    return ID + _key(key) + jid.encode("utf-8")


def bucket(event_time: int) -> int:
    """The first event time of ``event_time``'s expiry bucket."""
    return event_time - event_time % BUCKET_MS


def expiry_key(partition: int, event_time: int, key: str) -> bytes:
    """The ``X`` row of ``key``'s joins in the bucket of ``event_time``."""
    return (
        EXPIRY
        + partition.to_bytes(_U32, "big")
        + bucket(event_time).to_bytes(_U64, "big")
        + _key(key)
    )


def expiry_range(partition: int, start: int | None, end: int | None) -> tuple[bytes, bytes]:
    """[lo, hi) of the expiry keys of ``partition`` whose bucket starts in ``[start, end)``."""
    prefix = EXPIRY + partition.to_bytes(_U32, "big")
    lo = prefix + max(start or 0, 0).to_bytes(_U64, "big")
    if end is None:
        return lo, EXPIRY + (partition + 1).to_bytes(_U32, "big")
    return lo, prefix + max(end, 0).to_bytes(_U64, "big")


def split_expiry_key(raw: bytes) -> tuple[int, int, str]:
    """(partition, bucket start, key) of an :func:`expiry_key`."""
    at = 1 + _U32 + _U64
    n = int.from_bytes(raw[at : at + _U32], "big")
    return (
        int.from_bytes(raw[1 : 1 + _U32], "big"),
        int.from_bytes(raw[1 + _U32 : at], "big"),
        raw[at + _U32 : at + _U32 + n].decode("utf-8"),
    )


def held_key(partition: int, event_time: int, key: str, jid: str, kind: bytes = HELD) -> bytes:
    """The ``H`` row of a join a bounded hold keeps waiting (``kind`` R: a released one)."""
    return (
        kind
        + partition.to_bytes(_U32, "big")
        + event_time.to_bytes(_U64, "big")
        + _key(key)
        + jid.encode("utf-8")
    )


def held_range(
    partition: int, start: int | None, end: int | None, kind: bytes = HELD
) -> tuple[bytes, bytes]:
    """[lo, hi) of the held (``kind`` R: released) keys of ``partition`` with
    ``start <= event_time < end``."""
    prefix = kind + partition.to_bytes(_U32, "big")
    lo = prefix + max(start or 0, 0).to_bytes(_U64, "big")
    if end is None:
        return lo, kind + (partition + 1).to_bytes(_U32, "big")
    return lo, prefix + max(end, 0).to_bytes(_U64, "big")


def split_held_key(raw: bytes) -> tuple[int, int, str, str]:
    """(partition, event time, key, join id) of a :func:`held_key`."""
    at = 1 + _U32 + _U64
    n = int.from_bytes(raw[at : at + _U32], "big")
    return (
        int.from_bytes(raw[1 : 1 + _U32], "big"),
        int.from_bytes(raw[1 + _U32 : at], "big"),
        raw[at + _U32 : at + _U32 + n].decode("utf-8"),
        raw[at + _U32 + n :].decode("utf-8"),
    )


def version_key(key: str, event_time: int, values: list[Any]) -> bytes:
    """The ``V`` row of one version of ``key``'s dimension."""
    digest = hashlib.blake2b(orjson.dumps(values), digest_size=8).digest()
    return VERSION + _key(key) + event_time.to_bytes(_U64, "big") + digest


def version_range(key: str, start: int | None, end: int | None) -> tuple[bytes, bytes]:
    """[lo, hi) of the version keys of ``key`` with ``start <= event_time < end`` (None: open)."""
    prefix = VERSION + _key(key)
    lo = prefix + max(start or 0, 0).to_bytes(_U64, "big")
    if end is None or end > _MAX_TIME:
        return lo, prefix_end(prefix)  # type: ignore[return-value]  # (never all 0xff: V...)
    return lo, prefix + max(end, 0).to_bytes(_U64, "big")

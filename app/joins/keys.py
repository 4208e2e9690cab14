"""Byte keys of the per-join layout, ordered so that what the engine looks for is one range.

join key:   u32be(len(key)) ++ key ++ join id        -> one key's joins are one prefix
expiry key: u32be(partition) ++ u64be(event_time) ++ join key
            -> one partition's joins in event-time order: "older than the horizon" is one range

The length prefix keeps a key from being a prefix of another (``"ab"`` vs ``"abc"``). Event times
are >= 0 (app.records), so plain unsigned big-endian bytes sort like the numbers.
"""

from __future__ import annotations

__all__ = ["expiry_key", "expiry_upto", "join_key", "key_prefix", "partition_prefix",
           "split_expiry_key", "split_join_key"]

_U32 = 4
_U64 = 8


def key_prefix(key: str) -> bytes:
    """The first bytes of every join key of ``key``."""
    raw = key.encode("utf-8")
    return len(raw).to_bytes(_U32, "big") + raw


def join_key(key: str, jid: str) -> bytes:
    return key_prefix(key) + jid.encode("utf-8")


def split_join_key(raw: bytes) -> tuple[str, str]:
    """(key, join id) of a :func:`join_key`."""
    n = int.from_bytes(raw[:_U32], "big")
    return raw[_U32:_U32 + n].decode("utf-8"), raw[_U32 + n:].decode("utf-8")


def partition_prefix(partition: int) -> bytes:
    return partition.to_bytes(_U32, "big")


def expiry_key(partition: int, event_time: int, key: str, jid: str) -> bytes:
    return partition_prefix(partition) + event_time.to_bytes(_U64, "big") + join_key(key, jid)


def expiry_upto(partition: int, event_time: int) -> bytes:
    """Exclusive upper end of the expiry keys of ``partition`` older than ``event_time``."""
    return partition_prefix(partition) + max(event_time, 0).to_bytes(_U64, "big")


def split_expiry_key(raw: bytes) -> tuple[int, int, str, str]:
    """(partition, event_time, key, join id) of an :func:`expiry_key`."""
    key, jid = split_join_key(raw[_U32 + _U64:])
    return (int.from_bytes(raw[:_U32], "big"), int.from_bytes(raw[_U32:_U32 + _U64], "big"),
            key, jid)

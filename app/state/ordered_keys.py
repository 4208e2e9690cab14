"""Composite table keys whose byte order is numeric order, so a range of keys is a range scan.

key: (zone_id, car_id) -> 16 bytes = u64be(zone_id + 2**63) ++ u64be(car_id + 2**63)

Each id is a signed 64-bit integer (the whole int64 range; the wire contract only lets ids
>= 0 in, see :mod:`app.inputs.records`). Adding 2**63 is the sign-bit flip of two's complement: it maps
[-2**63, 2**63) onto [0, 2**64) monotonically, and fixed-width big-endian bytes of unsigned
integers compare like the integers. Both halves have the same width, so comparing two keys byte
by byte compares zone ids first and car ids second: the cars of one zone are one contiguous run
of keys, between :func:`zone_prefix` and :func:`prefix_end` of it.
"""

from __future__ import annotations

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "KEY_SIZE",
    "decode_int64",
    "decode_zone_car",
    "encode_int64",
    "encode_zone_car",
    "prefix_end",
    "zone_prefix",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_BIAS = 2**63  # the sign-bit flip
_WIDTH = 8
KEY_SIZE = 2 * _WIDTH


def encode_int64(value: int) -> bytes:
    """8 bytes, big-endian, sign bit flipped: byte order of the results = numeric order."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"an id must be an int, got {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"id {value} is outside the signed 64-bit range")
    return (value + _BIAS).to_bytes(_WIDTH, "big")


def decode_int64(raw: bytes) -> int:
    return int.from_bytes(raw, "big") - _BIAS


def encode_zone_car(zone_id: int, car_id: int) -> bytes:
    """The table key of car ``car_id`` in zone ``zone_id``."""
    return encode_int64(zone_id) + encode_int64(car_id)


def decode_zone_car(key: bytes) -> tuple[int, int]:
    """(zone_id, car_id) of a key made by :func:`encode_zone_car`."""
    if len(key) != KEY_SIZE:
        raise ValueError(f"a (zone_id, car_id) key has {KEY_SIZE} bytes, got {len(key)}")
    return decode_int64(key[:_WIDTH]), decode_int64(key[_WIDTH:])


def zone_prefix(zone_id: int) -> bytes:
    """The first half of every key of zone ``zone_id``."""
    return encode_int64(zone_id)


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string that starts with ``prefix``.

    ``None`` when there is none (the prefix is all 0xff: the last zone of the int64 range), which
    the range scan reads as "to the end".
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])

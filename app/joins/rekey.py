"""The join key of a record keyed otherwise: what a repartition hop keys it by.

A side with ``"repartition": true`` (docs/joins/declarative.md#any-record-key) is read with any
record key, or none; the hop (:mod:`app.agents.repartition`) re-keys each record by its key
field's UTF-8 bytes. The record is validated here by the side's own parser, as the join would,
so a record the join would refuse is refused before the hop, with the join's reason, naming the
user's topic and offset in its dead letter. No Faust: the docs' example and the unit tests read
records through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from app.joins.spec import Side

__all__ = ["any_key_parser", "key_at", "rekeyer"]


def key_at(value: bytes | None, path: tuple[str, ...]) -> bytes | None:
    """The UTF-8 bytes of the string at ``path`` of a JSON object value (None: not there, or
    not a string; the side's parser then says why)."""
    try:
        node: Any = orjson.loads(value) if value else None
    except orjson.JSONDecodeError:
        return None
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node.encode() if isinstance(node, str) else None


def any_key_parser(side: Side) -> Callable[..., Any]:
    """``(key, value, timestamp=None) -> the flat record`` of a side, whatever its record key
    (the key is ignored: the record is read as if keyed by its key field); raises
    :class:`~app.inputs.records.InvalidRecord` with the reason the join would give. What the
    hop and ``archive`` read a repartitioned side's own topic with."""
    path = tuple(side.path_of(side.key).split("."))
    parse = side.parser()

    def parse_any_key(key: bytes | None, value: bytes | None, timestamp: int | None = None) -> Any:
        return parse(key_at(value, path), value, timestamp)

    return parse_any_key


def rekeyer(side: Side) -> Callable[[bytes | None, int | None], tuple[bytes, int]]:
    """``(value, Kafka timestamp) -> (join key bytes, event time)`` of one side; raises
    :class:`~app.inputs.records.InvalidRecord` with the reason the join would give."""
    parse = any_key_parser(side)
    key, time = side.key, side.time

    def rekey(value: bytes | None, timestamp: int | None = None) -> tuple[bytes, int]:
        record = parse(None, value, timestamp)
        return str(getattr(record, key)).encode(), getattr(record, time)

    return rekey

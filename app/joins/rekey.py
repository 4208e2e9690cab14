"""The join key of a record keyed otherwise: what a repartition hop keys it by.

A side with ``"repartition": true`` (docs/joins/declarative.md#any-record-key) is read with any
record key, or none; the hop (:mod:`app.agents.repartition`) re-keys each record by its join
key's UTF-8 bytes (the key field's text, or a composite key's JSON array). The record is validated here by the side's own parser, as the join would,
so a record the join would refuse is refused before the hop, with the join's reason, naming the
user's topic and offset in its dead letter. No Faust: the docs' example and the unit tests read
records through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.joins.spec import Side

__all__ = ["any_key_parser", "rekeyer"]


def any_key_parser(side: Side) -> Callable[..., Any]:
    """``(key, value, timestamp=None, headers=None) -> the flat record`` of a side, whatever
    its record key (the key is not checked: the record is re-keyed by its join key); raises
    :class:`~app.inputs.records.InvalidRecord` with the reason the join would give. What the
    hop and ``archive`` read a repartitioned side's own topic with."""
    return side.parser(check_key=False)


def rekeyer(side: Side) -> Callable[..., tuple[bytes, int]]:
    """``(value, Kafka timestamp, headers) -> (join key bytes, event time)`` of one side: the
    join key is :attr:`Side.join_key` (a key field's text, an int's decimal digits, a
    composite key's JSON array); raises :class:`~app.inputs.records.InvalidRecord` with the
    reason the join would give."""
    parse = any_key_parser(side)
    join_key, time = side.join_key, side.time

    def rekey(
        value: bytes | None, timestamp: int | None = None, headers: Any = None
    ) -> tuple[bytes, int]:
        record = parse(None, value, timestamp, headers)
        return join_key(record).encode(), getattr(record, time)

    return rekey

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

from app.inputs.wire_formats import encode_key
from app.joins.spec import Side

__all__ = ["any_key_parser", "rekeyer"]


def any_key_parser(side: Side, schemas: Any = None) -> Callable[..., Any]:
    """``(key, value, timestamp=None, headers=None) -> the flat record`` of a side, whatever
    its record key (the key is not compared: the record is re-keyed by its join key); raises
    :class:`~app.inputs.records.InvalidRecord` with the reason the join would give. What the
    hop and ``archive`` read a repartitioned side's own topic with. ``schemas``: the writer
    schemas of a side written otherwise than JSON text."""
    return side.parser(schemas, check_key=False)


def rekeyer(side: Side, schemas: Any = None) -> Callable[..., tuple[bytes, int]]:
    """``(value, Kafka timestamp, headers) -> (join key bytes, event time)`` of one side: the
    join key is :attr:`Side.join_key` (a key field's text, an int's decimal digits, a
    composite key's JSON array), written as the join's other input writes its keys
    (``hop_key_format``: text, or a long or an int as Kafka's serializers write them), so the
    two co-partition by bytes; raises :class:`~app.inputs.records.InvalidRecord` with the
    reason the join would give."""
    parse = any_key_parser(side, schemas)
    join_key, time, key_format = side.join_key, side.time, side.hop_key_format

    def rekey(
        value: bytes | None, timestamp: int | None = None, headers: Any = None
    ) -> tuple[bytes, int]:
        record = parse(None, value, timestamp, headers)
        text = join_key(record)
        return (
            text.encode() if key_format == "str" else encode_key(text, key_format),
            getattr(record, time),
        )

    return rekey

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

from app.inputs.wire_formats import encode_key
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


def any_key_parser(side: Side, schemas: Any = None) -> Callable[..., Any]:
    """``(key, value, timestamp=None) -> the flat record`` of a side, whatever its record key
    (the key is ignored: the record is read as if keyed by its key field); raises
    :class:`~app.inputs.records.InvalidRecord` with the reason the join would give. What the
    hop and ``archive`` read a repartitioned side's own topic with. ``schemas``: the writer
    schemas of a side written otherwise than JSON text (its value is decoded once, its key
    field not compared)."""
    if side.format != "json":
        decoded = side.parser(schemas, check_key=False)

        def parse_decoded(key: bytes | None, value: bytes | None, timestamp: Any = None) -> Any:
            return decoded(None, value, timestamp)

        return parse_decoded
    path = tuple(side.path_of(side.key).split("."))
    parse = side.parser(key_format="str")  # key_at gives the key field's text

    def parse_any_key(key: bytes | None, value: bytes | None, timestamp: int | None = None) -> Any:
        return parse(key_at(value, path), value, timestamp)

    return parse_any_key


def rekeyer(
    side: Side, schemas: Any = None
) -> Callable[[bytes | None, int | None], tuple[bytes, int]]:
    """``(value, Kafka timestamp) -> (join key bytes, event time)`` of one side; raises
    :class:`~app.inputs.records.InvalidRecord` with the reason the join would give. The key is
    written as the join's other input writes its keys (``hop_key_format``: text, or a long or
    an int as Kafka's serializers write them), so the two co-partition by bytes."""
    parse = any_key_parser(side, schemas)
    key, time, key_format = side.key, side.time, side.hop_key_format

    def rekey(value: bytes | None, timestamp: int | None = None) -> tuple[bytes, int]:
        record = parse(None, value, timestamp)
        text = str(getattr(record, key))
        return (
            text.encode() if key_format == "str" else encode_key(text, key_format),
            getattr(record, time),
        )

    return rekey

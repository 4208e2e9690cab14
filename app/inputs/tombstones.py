"""A tombstone (a record with a null value) read as what it means on the side it came on: no
Faust, like the rest of a record's way in.

Compacted and CDC topics (Debezium, upsert topics) delete a key by a tombstone. It carries no
value, so what it says comes from the record alone: its **key** (the record key, read by the
side's ``key_format`` into its key text and checked against the side's key fields as a value's
key would be) and its **time** (the record's Kafka timestamp). Read so, it is an :class:`End`:
the side's join then ends the key's current version at that time (a dimension:
:func:`app.logic.histories.end`) or removes the key's row (a foreign-key side). Where a
tombstone means nothing (an events topic: an event happened, it has no current version to
end) it stays a dead letter, with a reason that says so (:data:`NOT_A_DELETE`).

Only a null value is a tombstone, as for Kafka's compaction; an empty value (``b""``) is no
tombstone and stays a dead letter as it was ("empty value").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, NamedTuple

import orjson
from pydantic import TypeAdapter, ValidationError

from app.inputs.records import MAX_EVENT_TIME, InvalidRecord, join_key_text
from app.inputs.wire_formats import key_decoder

__all__ = [
    "CARS_TAKE_NO_DELETES",
    "NOT_A_DELETE",
    "REKEYED",
    "End",
    "end_reader",
    "side_end_reader",
]

#: the dead letter's reason of a tombstone on an events topic
NOT_A_DELETE = (
    "a tombstone (null value) on an events topic is not a delete: an event has no version to "
    "end (tombstones end versions on a dimension topic and delete rows on a foreign-key side)"
)

#: ... and on a repartitioned side (what its join reads is the hop's topic, keyed by the join
#: key the hop read from each value: a tombstone has none)
REKEYED = (
    "a tombstone on a repartitioned side: its record key is not the join key and it has no "
    "value to read one from, so it deletes nothing"
)

#: ... and on the built-in car join's topics (its consumer rule, docs/joins/car-zone.md, has no
#: delete; a foreign-key spec of the user's takes them)
CARS_TAKE_NO_DELETES = (
    "a tombstone on the car join's topics deletes nothing: its consumer rule has no delete "
    "(a foreign-key spec of your own takes them)"
)


class End(NamedTuple):
    """A tombstone read: the join key ``key`` has no value from ``event_time`` on."""

    key: str
    event_time: int

    def as_record(self) -> dict[str, Any]:
        """What the late topic says of it (its ``record``: there is no value to copy)."""
        return {"tombstone": {"key": self.key, "timestamp": self.event_time}}


def _adapter(field: Any) -> TypeAdapter[Any]:
    """A validator of one key field's value, with the field's own constraints (a ``str``'s
    length, an id's bounds)."""
    if field.metadata:
        return TypeAdapter(Annotated[(field.annotation, *field.metadata)])
    return TypeAdapter(field.annotation)


def end_reader(
    model: Any,
    key_parts: Sequence[str],
    names: Sequence[str],
    decode_key: Callable[[bytes | None], bytes | None] | None,
) -> Callable[[bytes | None, int | None], End]:
    """``(record key, Kafka timestamp) -> End`` for a side whose records are ``model``, keyed
    by ``key_parts`` (flat fields; several: a composite key), named ``names`` in messages (the
    spec's paths); ``decode_key``: the side's key format's decoder (None: the key is its text).
    Raises :class:`InvalidRecord` saying why a tombstone cannot be read."""
    fields = model.model_fields
    kinds = ["int" if fields[f].annotation is int else "str" for f in key_parts]
    adapters = [_adapter(fields[f]) for f in key_parts]
    composite = len(key_parts) > 1
    shown = ", ".join(names)

    def part(i: int, value: Any) -> Any:
        kind = kinds[i]
        if kind == "int":
            if isinstance(value, str):
                try:
                    n = int(value)
                except ValueError:
                    n = None
                if n is None or str(n) != value:
                    raise InvalidRecord(
                        f"tombstone key {value[:60]!r} is not an integer, as {names[i]} is"
                    )
                value = n
            elif not isinstance(value, int) or isinstance(value, bool):
                raise InvalidRecord(f"tombstone key part {i + 1} is not an integer ({names[i]})")
        elif not isinstance(value, str):
            raise InvalidRecord(f"tombstone key part {i + 1} is not a string ({names[i]})")
        try:
            return adapters[i].validate_python(value, strict=True)
        except ValidationError as exc:
            msg = exc.errors(include_url=False)[0]["msg"]
            raise InvalidRecord(f"tombstone key: {names[i]}: {msg}") from None

    def read(key: bytes | None, timestamp: int | None) -> End:
        if decode_key is not None:
            key = decode_key(key)
        if key is None:
            raise InvalidRecord(
                f"a tombstone without a key: nothing to delete (it must be keyed by {shown})"
            )
        if timestamp is None or timestamp < 0:
            raise InvalidRecord("a tombstone without a Kafka timestamp: no time to delete at")
        if timestamp >= MAX_EVENT_TIME:
            raise InvalidRecord(f"a tombstone's Kafka timestamp {timestamp} is after 2100")
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecord("tombstone key is not UTF-8 text") from None
        if not composite:
            value = part(0, text)
            return End(text if kinds[0] == "str" else str(value), timestamp)
        try:
            values = orjson.loads(key)
        except ValueError:
            values = None
        if not isinstance(values, list) or len(values) != len(key_parts):
            raise InvalidRecord(
                f"tombstone key {text[:60]!r} is not a composite key of {len(key_parts)} "
                f"parts ({shown}) as a JSON array"
            )
        canonical = join_key_text(part(i, v) for i, v in enumerate(values))
        if canonical != text:
            raise InvalidRecord(
                f"tombstone key {text[:60]!r} is not written as the join writes it "
                f"({canonical[:60]!r}: a compact JSON array)"
            )
        return End(canonical, timestamp)

    return read


def side_end_reader(side: Any, schemas: Any = None) -> Callable[[bytes | None, int | None], End]:
    """:func:`end_reader` of a join's side (an :class:`app.joins.spec.Side`: its model, key
    fields, their paths, and the format of the keys of the topic its join reads)."""
    return end_reader(
        side.model,
        side.key_parts,
        [side.path_of(f) for f in side.key_parts],
        key_decoder(side.input_key_format, schemas),
    )

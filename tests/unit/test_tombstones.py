"""A tombstone read from its record alone (app.inputs.tombstones): the key by the side's key
format and key fields, the time from the Kafka timestamp; every key a value's key check would
refuse is refused with a reason."""

from __future__ import annotations

import struct
from typing import Annotated

import pytest
from pydantic import Field, create_model

from app.inputs.records import InvalidRecord
from app.inputs.tombstones import End, end_reader
from app.inputs.wire_formats import key_decoder

Name = Annotated[str, Field(min_length=1, max_length=200)]
Model = create_model("Model", name=(Name, ...), tenant=(Name, ...), n=(int, ...), t=(int, ...))


def reader(*parts: str, key_format: str = "str"):
    return end_reader(Model, parts, [f"value.{p}" for p in parts], key_decoder(key_format, None))


def test_a_str_key_is_the_join_key_and_the_timestamp_its_time():
    assert reader("name")(b"ann", 1_700) == End("ann", 1_700)
    assert End("ann", 5).as_record() == {"tombstone": {"key": "ann", "timestamp": 5}}


@pytest.mark.parametrize(
    ("key", "timestamp", "reason"),
    [
        (None, 5, "a tombstone without a key"),
        (b"ann", None, "without a Kafka timestamp"),
        (b"ann", -1, "without a Kafka timestamp"),
        (b"ann", 4_102_444_800_000, "after 2100"),
        (b"", 5, "value.name: String should have at least 1 character"),
        (b"x" * 201, 5, "value.name: String should have at most 200 characters"),
        (b"\xffann", 5, "tombstone key is not UTF-8 text"),
    ],
)
def test_what_a_value_s_key_check_refuses_a_tombstone_s_refuses(key, timestamp, reason):
    with pytest.raises(InvalidRecord, match=reason):
        reader("name")(key, timestamp)


def test_an_int_key_is_its_decimal_text_in_any_key_format():
    assert reader("n")(b"42", 1) == End("42", 1)
    assert reader("n", key_format="long")(struct.pack(">q", 42), 1) == End("42", 1)
    assert reader("n", key_format="json")(b"42", 1) == End("42", 1)
    for bad in (b"042", b"4.2", b"x"):
        with pytest.raises(InvalidRecord, match="is not an integer, as value.n is"):
            reader("n")(bad, 1)


def test_a_composite_key_is_read_as_the_join_writes_it_and_nothing_else():
    read = reader("tenant", "n")
    assert read(b'["acme",42]', 9) == End('["acme",42]', 9)
    for bad, reason in (
        (b'["acme", 42]', "not written as the join writes it"),
        (b'["acme"]', "not a composite key of 2 parts"),
        (b"acme", "not a composite key of 2 parts"),
        (b'[42,"acme"]', "part 1 is not a string"),
    ):
        with pytest.raises(InvalidRecord, match=reason):
            read(bad, 9)

"""app.compat.table_codec: table rows decode to what Faust's own path gives, without it."""

from __future__ import annotations

from types import SimpleNamespace

import faust
import orjson
import pytest
from faust.exceptions import KeyDecodeError, ValueDecodeError

from app.compat.table_codec import TableSchema
from app.faust_app import app

ROWS = [
    [[1790000000000, "happy"], [1790000000100, "sad"]],  # a history row
    [["j1", 3, 1790000000000, ["x"], [1790000000000, "happy"], None]],
    {"a": 1, "b": [1, 2.5, None, True]},
    17,
    "text",
    None,
]


def message(key: bytes | None, value: bytes | None) -> SimpleNamespace:
    return SimpleNamespace(key=key, value=value)


@pytest.mark.parametrize("row", ROWS)
def test_json_rows_decode_as_faust_decodes_them(row) -> None:
    ours = TableSchema(key_serializer="json", value_serializer="json")
    faust_own = faust.Schema(key_serializer="json", value_serializer="json")
    m = message(orjson.dumps("c0001"), orjson.dumps(row))
    assert ours.loads_key(app, m) == faust_own.loads_key(app, m) == "c0001"
    assert ours.loads_value(app, m) == faust_own.loads_value(app, m) == row


def test_raw_keys_pass_through_and_absent_values_stay_absent() -> None:
    ours = TableSchema(key_type=bytes, key_serializer="raw", value_serializer="json")
    faust_own = faust.Schema(key_type=bytes, key_serializer="raw", value_serializer="json")
    m = message(b"\x00zone\x00car", None)  # a tombstone of a range table
    assert ours.loads_key(app, m) == faust_own.loads_key(app, m) == b"\x00zone\x00car"
    assert ours.loads_value(app, m) is faust_own.loads_value(app, m) is None


def test_a_row_that_does_not_parse_raises_fausts_errors() -> None:
    ours = TableSchema(key_serializer="json", value_serializer="json")
    with pytest.raises(KeyDecodeError):
        ours.loads_key(app, message(b"{not json", b"1"))
    with pytest.raises(ValueDecodeError):
        ours.loads_value(app, message(b'"k"', b"[1, 2"))


class Point(faust.Record, serializer="json"):
    x: int


def test_a_model_type_is_left_to_faust() -> None:
    ours = TableSchema(key_serializer="json", value_type=Point, value_serializer="json")
    got = ours.loads_value(app, message(b'"k"', Point(x=3).dumps()))
    assert isinstance(got, Point) and got.x == 3


def test_undecoded_schemas_hand_the_changelogs_bytes_on() -> None:
    # a RocksDB store writes message.key / message.value and never reads the decoded event
    ours = TableSchema(key_serializer="json", value_serializer="json", decode=False)
    m = message(b'"c0001"', b'[[1790000000000, "happy"]]')
    assert (ours.loads_key(app, m), ours.loads_value(app, m)) == (m.key, m.value)
    broken = message(b"not json", b"{also not json")
    assert (ours.loads_key(app, broken), ours.loads_value(app, broken)) == (
        b"not json",
        b"{also not json",
    )
    assert ours.loads_value(app, message(b'"k"', None)) is None  # a tombstone stays one
    assert TableSchema(key_serializer="json", value_serializer="json").decode_rows  # the default

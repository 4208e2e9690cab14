"""app.state.overlay: an ordered table on RocksDB writes each row through to the store, and the
same bytes go to the changelog at the flush: the row is encoded once (issue 47: "no row encoded
twice"), and what the store holds is what the changelog says."""

from __future__ import annotations

import types
from typing import Any
from unittest import mock

import orjson

from app.state import overlay
from app.state.overlay import Overlay


class RocksLikeIO:
    """StoreIO's interface as it is for a RocksDB range table: no decoded mapping to write to,
    each row written at once as bytes."""

    changelog = "t-changelog"
    bytes_keys = True
    store = None

    def __init__(self) -> None:
        self.db: dict[bytes, bytes] = {}

    def memory_data(self) -> Any:
        return None

    def get(self, partition: int, key: bytes) -> Any:
        raw = self.db.get(key)
        return None if raw is None else orjson.loads(raw)

    def key_bytes(self, key: bytes) -> bytes:
        return key

    def write_one(self, partition: int, key: bytes, value: Any, raw: bytes | None = None) -> None:
        if value is None:
            self.db.pop(key, None)
        else:
            self.db[key] = orjson.dumps(value) if raw is None else raw


def test_a_row_written_through_is_encoded_once_and_logged_as_stored():
    io = RocksLikeIO()
    ov = Overlay(io)
    calls: list[Any] = []

    def dumps(value: Any) -> bytes:
        calls.append(value)
        return orjson.dumps(value)

    with mock.patch.object(overlay, "orjson", types.SimpleNamespace(dumps=dumps)):
        ov.put(0, b"J1", [1, "a"])
        ov.put(0, b"X1", 1, local=True)  # local: stored, never logged
        ov.put(0, b"J2", [2, "b"])
        ov.delete(0, b"J2")
        rows = ov.flush()
    assert len(calls) == 3  # J1, X1, J2: once each, none again at the flush
    assert rows == [("t-changelog", 0, b"J1", io.db[b"J1"]), ("t-changelog", 0, b"J2", None)]
    assert orjson.loads(io.db[b"J1"]) == [1, "a"] and b"J2" not in io.db

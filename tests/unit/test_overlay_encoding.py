"""app.state.overlay: an ordered table on RocksDB keeps a batch's rows (app.state.write_buffer)
and writes them at the flush, one write batch per partition: each row is encoded once, its last
value, for the store and the changelog alike (issue 47: "no row encoded twice"), what the store
holds is what the changelog says, and the batch reads its own rows before they are written."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any
from unittest import mock

import faust
import orjson

from app.state import overlay
from app.state.overlay import Overlay
from app.state.range_scan import range_table
from app.state.store_io import StoreIO


def rocksdb_table(datadir: Path) -> Any:
    app = faust.App(
        "overlay-encoding", broker="kafka://127.0.0.1:1", store="rocksdb://", datadir=str(datadir)
    )
    return range_table(app, "rows", default=None, partitions=2)


def test_a_batch_of_rows_is_written_once_each_encoded_once_and_logged_as_stored(tmp_path):
    io = StoreIO(rocksdb_table(tmp_path))
    ov = Overlay(io)
    calls: list[Any] = []

    def dumps(value: Any) -> bytes:
        calls.append(value)
        return orjson.dumps(value)

    with mock.patch.object(
        overlay, "orjson", types.SimpleNamespace(dumps=dumps, loads=orjson.loads)
    ):
        ov.put(0, b"J1", [0, "draft"])
        ov.put(0, b"J1", [1, "a"])  # written twice in the batch: encoded once, its last value
        ov.put(0, b"X1", 1, local=True)  # local: stored, never logged
        ov.put(0, b"J2", [2, "b"])
        ov.delete(0, b"J2")
        assert io.get(0, b"J1") is None  # nothing in the store before the flush ...
        assert list(ov.scan(0, b"J", b"K")) == [(b"J1", [1, "a"])]  # ... the batch reads it
        rows = ov.flush()
    assert calls == [[1, "a"], 1]  # J1 and X1, once each; J2 deleted: nothing to encode
    assert rows == [
        ("overlay-encoding-rows-changelog", 0, b"J1", orjson.dumps([1, "a"])),
        ("overlay-encoding-rows-changelog", 0, b"J2", None),
    ]
    assert io.get(0, b"J1") == [1, "a"] and io.get(0, b"X1") == 1 and io.get(0, b"J2") is None
    assert list(ov.scan(0, b"J", b"K")) == [(b"J1", [1, "a"])]  # the next batch reads the store

"""Faust's table schemas (``faust.Schema``): table rows decoded with orjson at once, not through
Faust's serializer registry (what it fixes: :class:`TableSchema`).

Here: etj's tables hold plain JSON (the row layouts of :mod:`app.joins.state` and
:mod:`app.joins.car_state`) under JSON or raw-byte keys, never a Faust model, so
:class:`TableSchema` decodes a ``json`` key or value with ``orjson.loads`` and passes a ``raw``
one through; anything else (a model type, another codec) goes to Faust as before. A row that does not parse raises Faust's own ``KeyDecodeError`` /
``ValueDecodeError``, as before. Writing is unchanged (Faust's ``json`` codec is orjson too).
A RocksDB store (``ETJ_STORE_URL=rocksdb://``) writes a changelog record's bytes as they are
(``Store.apply_changelog_batch`` puts ``message.key`` / ``message.value`` and ignores the decoded
event), so there ``app.topology`` builds its schemas with ``decode=False``: the key and value are
handed on undecoded (9 % of the main thread of a 1M-key RocksDB replay, py-spy ``--native``).
The rows are decoded when they are read, as rows installed from a snapshot always were; a row
that does not parse then fails its read instead of being skipped by the replay.
"""

from __future__ import annotations

from typing import Any

import faust
import orjson
from faust.exceptions import KeyDecodeError, ValueDecodeError

from app.compat.upstream import replaces

__all__ = ["TableSchema"]


#: what :func:`_decode` answers when Faust's own path must decode
FAUST = object()


def _decode(raw: bytes | None, serializer: Any, typ: Any, error: type[Exception]) -> Any:
    """A ``json`` key or value (no model type) parsed by orjson, a ``raw`` one as it is, else
    :data:`FAUST`; a row that does not parse raises Faust's ``error``."""
    if raw is None:
        return FAUST
    if serializer == "raw" and typ in (None, bytes):
        return raw
    if serializer != "json" or typ is not None:
        return FAUST
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise error(str(exc)) from exc


@replaces(
    ("faust.serializers.schemas:Schema.__init__", "c414846b8d2b"),
    ("faust.serializers.schemas:Schema.loads_key", "2e1724f7a6a7"),
    ("faust.serializers.schemas:Schema.loads_value", "d5a89118ae85"),
)
class TableSchema(faust.Schema):
    """A table's schema (``app.topology``): plain JSON rows, decoded without the registry;
    ``decode=False``: not decoded at all (a store that keeps the changelog's bytes).

    Upstream: ``Schema.loads_key`` / ``loads_value`` send each changelog record's key and value
    through the serializer registry: bytes made a ``str``, ``orjson.loads``, then a look for a
    Faust model namespace in every value, which on a list (every etj row is one) raises a
    ``TypeError`` and catches it.

    Symptom: decoding was 29 % of the main thread of a 1M-key replay, the largest share after
    the event loop (``python -m bench.profile_worker --recovery 1000000``); for a RocksDB
    store, which writes the changelog's bytes as they are, the decode was 9 % spent for
    nothing.

    Test: tests/unit/test_table_codec.py::test_json_rows_decode_as_faust_decodes_them

    Remove when: Faust decodes without the per-value model lookup and skips decoding for
    stores that keep bytes.
    """

    def __init__(self, *, decode: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: not ``self.decode``: that is Schema's ``decode`` method, which the flag shadowed
        self.decode_rows = decode

    def loads_key(
        self, app: Any, message: Any, *, loads: Any = None, serializer: Any = None
    ) -> Any:
        if not self.decode_rows:
            return message.key
        got = _decode(message.key, serializer or self.key_serializer, self.key_type, KeyDecodeError)
        if got is FAUST:
            return super().loads_key(app, message, loads=loads, serializer=serializer)
        return got

    def loads_value(
        self, app: Any, message: Any, *, loads: Any = None, serializer: Any = None
    ) -> Any:
        if not self.decode_rows:
            return message.value
        got = _decode(
            message.value, serializer or self.value_serializer, self.value_type, ValueDecodeError
        )
        if got is FAUST:
            return super().loads_value(app, message, loads=loads, serializer=serializer)
        return got

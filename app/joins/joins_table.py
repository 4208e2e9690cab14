"""A join's ordered table (``joins``) as stored and recovered: :class:`JoinsTable` applies its
changelog, whose rows are the ``J`` rows (one per join) and the ``V`` rows (one per dimension
version), and derives from the ``J`` rows their index rows (``I``, ``X``, and a hold spec's
``H``/``R``: :func:`hold_rows`), so that an event costs one changelog row;
:func:`joins_overlay` is a batch's view of it, :func:`stored_versions` a key's versions as the
join sees them. The layout and why: :mod:`app.joins.state`; the byte keys:
:mod:`app.joins.keys`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from app.joins.keys import (
    ID,
    JOIN,
    RELEASED,
    VERSION,
    expiry_key,
    held_key,
    id_key,
    key_group,
    split_join_key,
    version_range,
)
from app.logic.event_join import Join
from app.logic.histories import Version
from app.state.ordered_keys import prefix_end
from app.state.overlay import Overlay
from app.state.range_scan import KindedRangeTable
from app.state.store_io import StoreIO, iter_range

__all__ = [
    "JoinsTable",
    "StateLayoutError",
    "hold_rows",
    "joins_overlay",
    "stored_versions",
]


class StateLayoutError(RuntimeError):
    """A changelog holds rows of a state layout this version cannot read."""


class JoinsTable(KindedRangeTable):
    """A join's ordered table: its ``J`` rows come from the changelog, and their ``I`` and
    ``X`` index rows are derived from them as they are applied (recovery, standbys)."""

    #: the spec the table belongs to (for the error that names it)
    join_name: str = "?"
    #: in the snapshots' fingerprint: a snapshot of the layout before is never installed
    state_layout = "joins-and-versions-by-key-time"
    #: the memory store's layout (app.state.split_sorted.SplitSortedDict): the id index is looked up
    #: by point only (unsorted); a key's joins are scanned within the key only (per key); the
    #: kind of a row is its first byte
    kind_by_first_byte = True
    #: (payload fields, dimension fields) of a spec with a bounded hold: its ``H``/``R`` rows
    #: are derived from its ``J`` rows too (:func:`hold_rows`); None: no hold
    hold_shape: tuple[int, int] | None = None

    @staticmethod
    def point_key(key: bytes) -> bool:
        return key[:1] == ID

    @staticmethod
    def group_key(key: bytes) -> bytes | None:
        return key_group(key) if key[:1] in (JOIN, VERSION) else None

    group_end = staticmethod(prefix_end)  # where a key's joins end

    def apply_changelog_batch(self, batch: Iterable[Any]) -> None:
        events = list(batch)
        for event in events:
            key = event.message.key
            if not (isinstance(key, bytes) and key[:1] in (JOIN, VERSION)):
                raise StateLayoutError(
                    f"join {self.join_name!r}: changelog {self.changelog_topic.get_topic_name()}"
                    f" holds a row of an older state layout (key {key!r:.60}); this version "
                    "keeps one row per join (docs/operating/recovery.md#state-layout-changes "
                    "says how to move to it)"
                )
        super().apply_changelog_batch(events)
        io = StoreIO(self)
        derived: dict[int, list[tuple[Any, bytes | None, Any]]] = {}
        for event in events:
            if event.message.key[:1] != JOIN:
                continue  # a version: no index
            p = event.message.partition
            key, t, jid = split_join_key(event.message.key)
            rows = derived.setdefault(p, [])
            if event.message.value is None:  # its bucket's row goes when the bucket is purged
                if io.get(p, id_key(key, jid)) == t:
                    rows.append((id_key(key, jid), None, None))
            else:
                rows.append((id_key(key, jid), str(t).encode(), t))
                rows.append((expiry_key(p, t, key), b"1", 1))
            if self.hold_shape is not None:
                value = event.message.value
                raw = (
                    None
                    if value is None
                    else (orjson.loads(value) if isinstance(value, (bytes, str)) else value)
                )
                rows += hold_rows(p, key, t, jid, raw, *self.hold_shape)
        for p, rows in derived.items():
            io.write(p, rows)


def hold_rows(
    p: int,
    key: str,
    t: int,
    jid: str,
    raw: Any,
    n_payload: int,
    n_dim: int,
) -> list[tuple[bytes, bytes | None, Any]]:
    """The ``H``/``R`` rows a stored join (``raw``; None: deleted) implies, as store rows
    (key, encoded or None to delete, value): held (revision 0) -> an ``H`` row; answered by
    its hold's end (a ``hold-end`` revision, current or superseded and not yet known
    delivered) -> an ``R`` row naming its source, which the next tick checks (re-emit after a
    crash, or forget once delivered)."""
    h, r = held_key(p, t, key, jid), held_key(p, t, key, jid, RELEASED)
    if raw is None:
        return [(h, None, None), (r, None, None)]
    j = Join.from_json(raw, n_payload, n_dim)
    rows: list[tuple[bytes, bytes | None, Any]] = [
        (h, b"1", 1) if j.revision == 0 else (h, None, None)
    ]
    src = (
        j.source
        if j.cause == "hold-end"
        else next((u[0] for u in j.unsent if u[2] == "hold-end"), None)
    )
    rows.append((r, orjson.dumps(src), src) if src is not None else (r, None, None))
    return rows


def joins_overlay(io: Any) -> Overlay:
    """A batch's view of the joins table, whose changelog rows put the batch's versions before
    its joins. Why: a join row names the version it answers with, and a crash can land any
    prefix of a batch's rows; in first-write order an event answered early in a batch and
    re-answered by a late version after it had its row before the version's, so a kill -9
    between them recovered a join naming a version the table did not have (a revision 3 that
    said "sad" where revision 2 had said "excited", findings.md). Versions never name joins."""
    return Overlay(io, logged_first=VERSION)


def stored_versions(joins: Any, history: Any, key: str, partition: int) -> list[Version] | None:
    """A key's versions as the join sees them, oldest first (ties in the tie rule's order):
    its ``V`` rows in the joins table, or its row of the layout before (``history``, the
    ``dimension`` table) when it was not converted yet; None when it has none (the web view,
    the tests)."""
    rows = sorted(v for _, v in iter_range(joins, *version_range(key, None, None), partition))
    if rows:
        return rows
    old = history.get(key)
    return sorted(old) if old else None

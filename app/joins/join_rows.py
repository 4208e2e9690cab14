"""What a join's engine reads and writes of its tables, through the batch's overlays
(:class:`JoinRows`, the base of :class:`app.joins.state.JoinState`): a join by its id and a
key's joins by time; a key's versions, one ``V`` row each (one reverse or forward read), purged
behind the horizon, and a key's row of the layout before converted to them; each partition's
stream time and finality promise, read once per batch and written at its end, and the
fingerprint of the spec that wrote its state, checked at the first of those reads in a batch
(:mod:`app.joins.fingerprint`). The layout and why: :mod:`app.joins.state`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.joins.fingerprint import SpecGuard, spec_row_key
from app.joins.keys import id_key, join_group, join_key, version_group, version_key
from app.joins.spec import JoinSpec
from app.logic.event_join import Join
from app.logic.finality import Promise
from app.logic.histories import Version, purge_history
from app.state.overlay import Overlay

__all__ = ["Delivered", "JoinRows"]

#: (partition, source of a revision) -> is its output known to be in the log?
Delivered = Callable[[int, Any], bool]


def _untracked(p: int, src: Any) -> bool:
    return src is None  # no sources kept (a replay without a broker): nothing to track


class JoinRows:
    """One spec's rows through the batch's overlays, and what it caches per batch (module
    docstring); :class:`app.joins.state.JoinState` applies the rules over them."""

    def __init__(
        self,
        spec: JoinSpec,
        history: Overlay,
        joins: Overlay,
        clock: Overlay,
        delivered: Delivered | None = None,
        emitted: Delivered | None = None,
        guard: SpecGuard | None = None,
    ) -> None:
        """``delivered(p, src)``: the outputs of input record ``src`` are in the log (a
        superseded revision it made may be dropped from state); ``emitted(p, src)``: they are
        in the log or on their way there from this process (a duplicate need not send them
        again; default: ``delivered``); ``guard``: the spec's fingerprint, checked against
        each partition's (None: not checked, not written)."""
        self.spec, self.rules = spec, spec.rules
        self.np, self.nd = len(spec.payload_fields), len(spec.dimension.copy)
        self.history, self.joins, self.clock = history, joins, clock
        self.delivered = delivered or _untracked
        self.emitted = emitted or self.delivered
        self._clocks = {}  # partition -> stream time, in the batch being handled
        self._moved = set()  # partitions whose stream time moved in it
        #: (partition, key) -> the record that converted its old-layout row (``_convert``)
        self._converting: dict[tuple[int, str], Any] = {}
        self._converted_now: set[tuple[int, str]] = set()  # ... in the batch being handled
        #: partition -> does the ``dimension`` table (the layout before ``V`` rows) hold no row
        #: in it? Asked once per batch: then no key needs converting, and no record pays a
        #: read of that table (a RocksDB ``get`` per version of a catalogue's replay)
        self._no_old_rows: dict[int, bool] = {}
        #: the ``X`` rows (app.joins.keys) written or found in the batch being handled
        self._x_seen: set[bytes] = set()
        #: a bounded hold (ms of stream time), None: none; partition -> the event time of its
        #: first held join (None: none), read once per batch (``release_holds``)
        self.hold = spec.hold_ms
        self._next_hold: dict[int, int | None] = {}
        #: partition -> its finality promise (app.logic.finality), read once per batch
        self._promises: dict[int, Promise] = {}
        self.guard = guard
        self._guarded: set[int] = set()  # partitions whose fingerprint this batch checked
        #: partition -> records before this event time are late (a longer retention's floor,
        #: kept with the fingerprint: app.joins.fingerprint); absent: none
        self.late_before: dict[int, int] = {}

    # --- rows --------------------------------------------------------------------------------
    def load(self, raw: Any) -> Join:
        return Join.from_json(raw, self.np, self.nd)

    def dump(self, j: Join) -> list[Any]:
        return j.to_json(self.nd)

    def _find(self, p: int, key: str, jid: str) -> tuple[int | None, Any]:
        """(event time, stored row) of a join by its id; (None, None) when there is none."""
        t = self.joins.get_point(p, id_key(key, jid))
        if t is None:
            return None, None
        raw = self.joins.get(p, join_key(key, t, jid))
        return (t, raw) if raw is not None else (None, None)

    def _joins_of(
        self,
        p: int,
        key: str,
        start: int | None,
        end: int | None,
    ) -> list[tuple[str, Join]]:
        """(jid, join) of the key's joins with ``start <= event_time < end``, by time."""
        jp, jend = join_group(key)
        lo = jp + (max(start, 0) if start else 0).to_bytes(8, "big")
        hi = jend if end is None else jp + max(end, 0).to_bytes(8, "big")
        at = len(jp) + 8  # a join row's id starts there (app.joins.keys)
        load, n, nd = Join.from_json, self.np, self.nd
        return [
            (k[at:].decode("utf-8"), load(raw, n, nd))
            for k, raw in self.joins.scan_in(p, jp, lo, hi)
        ]

    def _joins_made_by(
        self, p: int, key: str, src: Any, start: int | None, end: int | None
    ) -> list[tuple[str, Join]]:
        """:meth:`_joins_of`, only those with a revision made by ``src`` (current or
        superseded: :meth:`app.logic.event_join.Join.made_by`), told from the stored row
        before it is decoded."""
        jp, jend = join_group(key)
        lo = jp + (max(start, 0) if start else 0).to_bytes(8, "big")
        hi = jend if end is None else jp + max(end, 0).to_bytes(8, "big")
        at = len(jp) + 8
        tail = 4 + self.np + 2 * self.nd  # a row's source, then its unsent revisions
        out = []
        for k, raw in self.joins.scan_in(p, jp, lo, hi):
            n = len(raw)
            if (n > tail and raw[tail] == src) or (
                n > tail + 1 and any(u[0] == src for u in raw[tail + 1])
            ):
                out.append((k[at:].decode("utf-8"), self.load(raw)))
        return out

    # --- the clock: read once per batch, written once at its end ---------------------------
    def stream_time(self, p: int) -> int | None:
        clocks = self._clocks
        if p not in clocks:
            clocks[p] = self.clock.get(p, p)
            if self.guard is not None and p not in self._guarded:
                self._check_spec(p)
        return clocks[p]

    def _check_spec(self, p: int) -> None:
        """The spec that wrote ``p``'s state against this one (:class:`SpecGuard`), once per
        batch, before anything of the batch is joined on ``p``: a refusal ends the worker;
        a state without a fingerprint, or a compatible one, gets this spec's."""
        assert self.guard is not None
        self._guarded.add(p)
        key = spec_row_key(p)
        row, late_before = self.guard.check(p, self.clock.get(p, key), self.clock.get(p, p))
        if row is not None:
            self.clock.put(p, key, row)
        if late_before is None:
            self.late_before.pop(p, None)
        else:
            self.late_before[p] = late_before

    def advance(self, p: int, event_time: int) -> int:
        """The stream time of ``p`` once ``event_time`` is seen (it never goes back)."""
        clock = self.stream_time(p)
        if clock is None or event_time > clock:
            self._clocks[p] = event_time
            self._moved.add(p)
            return event_time
        return clock

    def end_batch(self) -> dict[int, int]:
        """The batch is handled: its stream times to the clock table (one row per partition
        that moved); those partitions and their stream times."""
        moved = {p: self._clocks[p] for p in self._moved}
        for p, t in moved.items():
            self.clock.put(p, p, t)
        self._clocks.clear()
        self._moved.clear()
        self._converted_now.clear()
        self._next_hold.clear()
        self._promises.clear()
        self._guarded.clear()
        self._no_old_rows.clear()
        self._x_seen.clear()
        for (p, key), src in list(self._converting.items()):
            if self.delivered(p, src):  # its V rows are in the log: the old row may go
                self.history.delete(p, key)
                del self._converting[(p, key)]
        return moved

    _clocks: dict[int, Any]
    _moved: set[int]

    # --- a key's versions: one ``V`` row each (app.joins.keys) ------------------------------
    # Each read is one search within the key's rows (app.state.overlay's ``*_in``): a version
    # time's rows are a *run*, the rows sharing the key's prefix and the time's 8 bytes.
    def _run(self, p: int, key: str, t: int, last: bool) -> list[Version]:
        """The key's versions at the greatest time before ``t`` (``last``), or at the least
        time at or after it, sorted (ties: the tie rule is the list order); [] when none."""
        vp, vend = version_group(key)
        at = vp + max(t, 0).to_bytes(8, "big")
        rows = (
            self.joins.run_in(p, vp, vp, at, True, len(vp) + 8)
            if last
            else self.joins.run_in(p, vp, at, vend, False, len(vp) + 8)
        )
        return sorted(v for _, v in rows)

    def _group(self, p: int, key: str, t: int) -> list[Version]:
        """The key's versions at time ``t``, sorted (ties: the tie rule is the list order)."""
        vp, _ = version_group(key)
        lo = vp + t.to_bytes(8, "big")
        return sorted(v for _, v in self.joins.scan_in(p, vp, lo, vp + (t + 1).to_bytes(8, "big")))

    def _time_before(self, p: int, key: str, t: int) -> int | None:
        """The greatest version time before ``t`` (one reverse read), or None."""
        vp, _ = version_group(key)
        row = self.joins.edge_in(p, vp, vp, vp + max(t, 0).to_bytes(8, "big"), True)
        return None if row is None else row[1][0]

    def _time_from(self, p: int, key: str, t: int) -> int | None:
        """The least version time at or after ``t`` (one forward read), or None."""
        vp, vend = version_group(key)
        row = self.joins.edge_in(p, vp, vp + max(t, 0).to_bytes(8, "big"), vend)
        return None if row is None else row[1][0]

    def _purge(self, p: int, key: str, horizon: int) -> int:
        """Delete the key's versions before ``horizon`` but the last (the greatest of the last
        time's): tombstones in the changelog. Reads only the rows before the horizon: two, to
        find whether there is anything to delete (the usual answer: no)."""
        vp, _ = version_group(key)
        hi = vp + max(horizon, 0).to_bytes(8, "big")
        joins = self.joins
        if len(joins.scan_in(p, vp, vp, hi, 2)) < 2:
            return 0
        rows = joins.scan_in(p, vp, vp, hi)
        last = rows[-1][1][0]
        keep = max(v for _, v in rows if v[0] == last)
        dropped = 0
        for k, v in rows:
            if v != keep:
                joins.delete(p, k)
                dropped += 1
        return dropped

    def _convert(self, p: int, key: str, src: Any) -> None:
        """A key whose versions are still one ``dimension`` row (the layout before one row per
        version: a changelog or a bootstrap written by an older version) gets them as ``V``
        rows; the old row is deleted (a tombstone) once ``src``, the record that converted
        it, is delivered: its changelog rows, the ``V`` rows with them, are then in the log,
        so a crash never leaves the tombstone without the rows. Until then each batch that
        reads the key writes its rows again (a batch dropped at a rebalance takes its
        changelog rows with it, not the rows already in the store). Versions the retention
        has already let go are not written again.

        The record waited for is the *first* that converted the key: any batch that wrote the
        rows, once delivered, puts them in the log. Waiting for the latest instead never ended
        for a key every batch reads (each batch named a record not yet delivered at its end):
        the old row stayed and every batch rewrote the key's whole history (findings.md)."""
        if (p, key) in self._converted_now:
            return
        none = self._no_old_rows.get(p)
        if none is None:
            none = self._no_old_rows[p] = self.history.store_empty(p)
        if none:
            return
        old = self.history.get(p, key)
        if not old:
            return
        clock = self.stream_time(p)
        versions = (
            old if clock is None else purge_history(sorted(old), clock - self.spec.retention_ms)
        )
        vp, _ = version_group(key)
        for v in versions:
            self.joins.put_in(p, vp, version_key(key, v[0], v[1:]), list(v))
        self._converted_now.add((p, key))
        self._converting.setdefault((p, key), src)

    # --- finality (app.logic.finality) ------------------------------------------------------
    def promise(self, p: int) -> Promise:
        """Partition ``p``'s promise (its clock-table row), read once per batch."""
        promise = self._promises.get(p)
        if promise is None:
            if self.guard is not None and p not in self._guarded:
                self._check_spec(p)
            promise = self._promises[p] = Promise.from_json(self.clock.get(p, f"final:{p}"))
        return promise

    def save_promise(self, p: int, promise: Promise) -> None:
        """With the batch's changelog: durable before the batch's outputs carry it."""
        self._promises[p] = promise
        self.clock.put(p, f"final:{p}", promise.to_json())

    def handled_to(self, p: int) -> list[list[int]]:
        """Partition ``p``'s last handled offset per input (``[[input, offset], ...]``), as
        the batches of whichever process handled it last left it in the clock table."""
        return self.clock.get(p, f"handled:{p}") or []

    def save_handled(self, p: int, frontier: list[list[int]]) -> None:
        """With the batch's changelog (its rows and this one are durable together)."""
        self.clock.put(p, f"handled:{p}", frontier)

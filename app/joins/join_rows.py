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
from app.joins.keys import id_key, join_key, join_range, split_join_key, version_key, version_range
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
        t = self.joins.get(p, id_key(key, jid))
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
        lo, hi = join_range(key, start, end)
        return [(split_join_key(k)[2], self.load(raw)) for k, raw in self.joins.scan(p, lo, hi)]

    def _joins_made_by(
        self, p: int, key: str, src: Any, start: int | None, end: int | None
    ) -> list[tuple[str, Join]]:
        """:meth:`_joins_of`, only those with a revision made by ``src`` (current or
        superseded: :meth:`app.logic.event_join.Join.made_by`)."""
        return [(jid, j) for jid, j in self._joins_of(p, key, start, end) if j.made_by(src)]

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
        for (p, key), src in list(self._converting.items()):
            if self.delivered(p, src):  # its V rows are in the log: the old row may go
                self.history.delete(p, key)
                del self._converting[(p, key)]
        return moved

    _clocks: dict[int, Any]
    _moved: set[int]

    # --- a key's versions: one ``V`` row each (app.joins.keys) ------------------------------
    def _group(self, p: int, key: str, t: int) -> list[Version]:
        """The key's versions at time ``t``, sorted (ties: the tie rule is the list order)."""
        return sorted(v for _, v in self.joins.scan(p, *version_range(key, t, t + 1)))

    def _time_before(self, p: int, key: str, t: int) -> int | None:
        """The greatest version time before ``t`` (one reverse read), or None."""
        row = self.joins.edge(p, *version_range(key, None, t), last=True)
        return None if row is None else row[1][0]

    def _time_from(self, p: int, key: str, t: int) -> int | None:
        """The least version time at or after ``t`` (one forward read), or None."""
        row = self.joins.edge(p, *version_range(key, t, None))
        return None if row is None else row[1][0]

    def _purge(self, p: int, key: str, horizon: int) -> int:
        """Delete the key's versions before ``horizon`` but the last (the greatest of the last
        time's): tombstones in the changelog. Reads only the rows before the horizon."""
        rows = list(self.joins.scan(p, *version_range(key, None, horizon)))
        if len(rows) < 2:
            return 0
        last = rows[-1][1][0]
        keep = max(v for _, v in rows if v[0] == last)
        dropped = 0
        for k, v in rows:
            if v != keep:
                self.joins.delete(p, k)
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
        old = self.history.get(p, key)
        if not old:
            return
        clock = self.stream_time(p)
        versions = (
            old if clock is None else purge_history(sorted(old), clock - self.spec.retention_ms)
        )
        for v in versions:
            self.joins.put(p, version_key(key, v[0], v[1:]), list(v))
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

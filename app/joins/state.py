"""Where a join's state lives: two table layouts, one set of rules (app.logic.event_join).

``per-key`` — one table row per key holds all of that key's recent joins (the original mood
join's ``recent-joins``). Cheap when a key has few joins in retention; each event rewrites the
key's row. A per-partition list of active keys drives the revisit (review, purge), and after a
reassignment the partition's current revisions are re-emitted once (see the agent).

``per-join`` — one row per join, under a byte key ``(key, join id)`` in an ordered table
(:mod:`app.joins.keys`, :mod:`app.range_scan`); an expiry index ``(partition, event_time, key,
join id)`` makes "older than the horizon" one range. An event writes one row (plus its index
row), whatever the key's fan-in; a dimension version reads the key's joins with one prefix scan.
The history row is purged when it is written (no active-key list to walk). Instead of
re-emitting a whole partition after a reassignment, a re-delivered record re-emits what it
touched: a duplicate event its join's revisions, a duplicate version those of the joins that
currently answer with it or have a revision it made (superseded since, perhaps, by a version
whose own re-delivery comes after this one is committed: without them, a gap). Records
re-delivered after a crash are exactly the ones whose outputs may be lost, so nothing is lost
and nothing is re-sent at scale.

A re-delivered record also writes again the rows it finds: a store can hold rows of records it
handled whose changelog rows were lost with a crashed process (their inputs were not committed,
so they come again, find their rows and change nothing), and without the write the changelog
would never get those rows: the next owner of the partition, which recovers from the changelog,
would lack them (a rating waiting for its movie never answered; found by the chaos run with
producer batching, when a worker restarted after a kill -9 still trusted its volume). Since
:mod:`app.local_state` discards a crashed worker's volume, a store is recovered from the
changelogs and this write is a second line of defence; it costs a row per duplicate.

Both layouts re-emit gap-free: with a join's current revision go the revisions it superseded
whose source (``src``: the input record that produced it, stamped by the agent) is not known to
be delivered (``delivered(p, src)``: this process acked that input record, which it does only
once the broker has its outputs, or its offset is committed). Each join row carries them
(:attr:`app.logic.event_join.Join.unsent`), so they are saved in the same changelog row as the
revision that superseded them; they are dropped when the join is next revised and their source
is known delivered.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import faust

from app.joins.keys import (expiry_key, expiry_upto, join_key, key_prefix, partition_prefix,
                            split_expiry_key, split_join_key)
from app.joins.spec import JoinSpec
from app.logic.event_join import (Event, Join, KeyState, Purged, Revision, Version,
                                  affected_floor, current_revisions, insert_version,
                                  purge_history, rejoin_affected, revisit, unsent_revisions)
from app.range_scan import scan, scan_prefix

__all__ = ["Layout", "PerJoinLayout", "PerKeyLayout"]


#: (partition, source of a revision) -> is its output known to be in the log?
Delivered = Callable[[int, Any], bool]


def _untracked(p: int, src: Any) -> bool:
    return src is None  # no sources kept (a replay without a broker): nothing to track


class Layout(Protocol):
    def on_event(self, p: int, e: Event, horizon: int | None,
                 release_from: int | None, src: Any = None) -> tuple[list[Revision], bool]: ...

    def on_version(self, p: int, key: str, v: Version, horizon: int | None,
                   release_from: int | None, src: Any = None) -> list[Revision]: ...

    def on_tick(self, p: int, clock: int, release_from: int | None, src: Any = None,
                ) -> tuple[list[Revision], Purged]: ...

    def resume(self, p: int) -> list[Revision]: ...


class _Codec:
    def __init__(self, spec: JoinSpec, delivered: Delivered | None) -> None:
        self.spec, self.rules = spec, spec.rules
        self.np, self.nd = len(spec.payload_fields), len(spec.dimension.copy)
        self.delivered = delivered or _untracked

    def settle(self, p: int, j: Join, src: Any) -> None:
        """``j`` has a new revision from ``src``: stamp it, drop its delivered superseded ones."""
        j.settle(src, lambda s: self.delivered(p, s))

    def unsent(self, p: int, jid: str, key: str, j: Join) -> list[Revision]:
        """What to re-emit for ``j``: its revisions that may be missing from the log."""
        return unsent_revisions(self.rules, jid, key, j, lambda s: self.delivered(p, s))

    def load(self, raw: Any) -> Join:
        return Join.from_json(raw, self.np, self.nd)

    def dump(self, j: Join) -> list[Any]:
        return j.to_json(self.nd)


class PerKeyLayout(_Codec):
    """history[key] = [[t, *values], ...]; joins[key] = {jid: join}; active[p] = [key, ...]."""

    def __init__(self, spec: JoinSpec, history: faust.Table, joins: faust.Table,
                 active: faust.Table, delivered: Delivered | None = None) -> None:
        super().__init__(spec, delivered)
        self.history, self.joins, self.active = history, joins, active

    def _load(self, key: str) -> KeyState:
        raw = self.joins.get(key) or {}
        return KeyState([list(v) for v in self.history.get(key) or []],
                        {jid: self.load(r) for jid, r in raw.items()})

    def _save_joins(self, key: str, state: KeyState) -> None:
        if state.joins:
            self.joins[key] = {jid: self.dump(j) for jid, j in state.joins.items()}
        elif self.joins.get(key) is not None:
            del self.joins[key]

    def _mark_active(self, p: int, key: str, again: bool = False) -> None:
        """``key`` in partition ``p``'s active keys; ``again``: write the row even if it is."""
        keys = self.active.get(p) or []
        if key not in keys:
            self.active[p] = sorted([*keys, key])
        elif again:
            self.active[p] = keys

    def on_event(self, p: int, e: Event, horizon: int | None,
                 release_from: int | None, src: Any = None) -> tuple[list[Revision], bool]:
        history = self.history.get(e.key) or []
        raw = self.joins.get(e.key) or {}
        old = raw.get(e.id)
        j, rev = self.rules.arrive(history, e, None if old is None else self.load(old),
                                   release_from)
        if rev:
            self.settle(p, j, src)  # type: ignore[arg-type]
        if j is not None:  # only this join is decoded; the row is rewritten as a whole
            self.joins[e.key] = {**raw, e.id: self.dump(j)}
        elif old is not None:  # a duplicate: its row again, for the changelog (docstring);
            self.joins[e.key] = raw  # what it may have lost is re-emitted by resume()
            self._mark_active(p, e.key, again=True)
            return [], False
        self._mark_active(p, e.key)
        return ([rev] if rev else []), (old is None and j is not None and j.revision == 0)

    def on_version(self, p: int, key: str, v: Version, horizon: int | None,
                   release_from: int | None, src: Any = None) -> list[Revision]:
        history = [list(x) for x in self.history.get(key) or []]
        if not insert_version(history, v):  # a duplicate: its rows again (module docstring)
            self.history[key] = history
            raw = self.joins.get(key)
            if raw:
                self.joins[key] = raw
            self._mark_active(p, key, again=True)
            return []
        self.history[key] = history
        raw = self.joins.get(key) or {}
        floor = affected_floor(history, v, self.rules.asof, horizon)
        cands = [(jid, self.load(r)) for jid, r in raw.items() if floor is None or r[0] >= floor]
        revs = list(rejoin_affected(self.rules, history, key, v, cands, horizon, release_from))
        if revs:
            changed = {r.id for r in revs}
            for jid, j in cands:
                if jid in changed:
                    self.settle(p, j, src)
            self.joins[key] = {**raw, **{jid: self.dump(j) for jid, j in cands
                                         if jid in changed}}
        self._mark_active(p, key)
        return revs

    def on_tick(self, p: int, clock: int, release_from: int | None, src: Any = None,
                ) -> tuple[list[Revision], Purged]:
        keys = self.active.get(p) or []
        horizon = clock - self.spec.retention_ms
        lag = self.spec.review_lag_ms
        review_from = None if lag is None else clock - lag
        out: list[Revision] = []
        total = Purged()
        still_active = []
        for key in keys:
            state = self._load(key)
            revs, purged = revisit(self.rules, state, key, review_from, horizon, release_from)
            for r in revs:
                if r.id in state.joins:  # a reviewed join may be purged at once
                    self.settle(p, state.joins[r.id], src)
            if revs or purged.joins:
                self._save_joins(key, state)
            if purged.versions:
                self.history[key] = state.history
            out += revs
            total = Purged(total.joins + purged.joins, total.unmatched + purged.unmatched,
                           total.versions + purged.versions)
            if state.joins or len(state.history) > 1:
                still_active.append(key)
        if still_active != keys:
            self.active[p] = still_active
        return out, total

    def resume(self, p: int) -> list[Revision]:
        return [r for key in self.active.get(p) or []
                for r in current_revisions(self.rules, self._load(key), key,
                                           lambda s: self.delivered(p, s))]


class PerJoinLayout(_Codec):
    """history[key] = [[t, *values], ...]; joins[(key, jid)] = join; expiry[(p, t, key, jid)]."""

    def __init__(self, spec: JoinSpec, history: faust.Table, joins: faust.Table,
                 expiry: faust.Table, delivered: Delivered | None = None) -> None:
        super().__init__(spec, delivered)
        self.history, self.joins, self.expiry = history, joins, expiry

    def on_event(self, p: int, e: Event, horizon: int | None,
                 release_from: int | None, src: Any = None) -> tuple[list[Revision], bool]:
        k = join_key(e.key, e.id)
        raw = self.joins.get(k)
        existing = None if raw is None else self.load(raw)
        old_time = None if existing is None else existing.event_time
        j, rev = self.rules.arrive(self.history.get(e.key) or [], e, existing, release_from)
        if j is None:  # a duplicate: perhaps re-delivered after a crash lost its output
            if existing is None:
                return [], False
            self.joins[k] = raw  # and its changelog rows (module docstring)
            self.expiry[expiry_key(p, existing.event_time, e.key, e.id)] = 1
            return self.unsent(p, e.id, e.key, existing), False
        if rev:
            self.settle(p, j, src)
        self.joins[k] = self.dump(j)
        if old_time != j.event_time:
            if old_time is not None:
                self._unindex(expiry_key(p, old_time, e.key, e.id))
            self.expiry[expiry_key(p, j.event_time, e.key, e.id)] = 1
        return ([rev] if rev else []), (existing is None and j.revision == 0)

    def _unindex(self, ek: bytes) -> None:
        if self.expiry.get(ek) is not None:
            del self.expiry[ek]

    def on_version(self, p: int, key: str, v: Version, horizon: int | None,
                   release_from: int | None, src: Any = None) -> list[Revision]:
        history = [list(x) for x in self.history.get(key) or []]
        if not insert_version(history, v):  # a duplicate: perhaps re-delivered after a crash
            self.history[key] = history  # its rows again (module docstring)
            return self._again(p, key, v, src)
        if horizon is not None:
            history = purge_history(history, horizon)
        self.history[key] = history
        if v not in history:  # older than the last version before the horizon: no effect,
            return self._again(p, key, v, src)  # unless it is re-delivered and made some
        floor = affected_floor(history, v, self.rules.asof, horizon)
        cands = [(jid, j) for jid, j, _ in self._joins_of(p, key, floor)]
        revs = list(rejoin_affected(self.rules, history, key, v, cands, horizon, release_from))
        changed = {r.id for r in revs}
        for jid, j in cands:
            if jid in changed:
                self.settle(p, j, src)
                self.joins[join_key(key, jid)] = self.dump(j)
        return revs

    def _again(self, p: int, key: str, v: Version, src: Any) -> list[Revision]:
        """A version seen before, or too old to change anything: re-emit (and write again) the
        joins that answer with it and those with a revision it made (``src``), current or
        superseded. The latter matter: once this record is acked and committed, the revisions
        it made count as delivered, and a later version may have taken over the join's answer
        before the crash (the chaos run found the gap: revision 1 never sent)."""
        out = []
        for jid, j, cur in self._joins_of(p, key, None):
            made = src is not None and (j.source == src or any(u[0] == src for u in j.unsent))
            if made or (j.answer_time == v[0] and j.answer == v[1:]):
                self.joins[join_key(key, jid)] = self.dump(j)
                if cur is not None:
                    out += self.unsent(p, jid, key, j)
        return out

    def _joins_of(self, p: int, key: str, floor: int | None,
                  ) -> list[tuple[str, Join, Revision | None]]:
        """(jid, join, its current revision) of the key's joins at or after ``floor``."""
        out = []
        for k, raw in list(scan_prefix(self.joins, key_prefix(key), p)):
            if floor is None or raw[0] >= floor:
                jid = split_join_key(k)[1]
                j = self.load(raw)
                out.append((jid, j, self.rules.current(jid, key, j)))
        return out

    def on_tick(self, p: int, clock: int, release_from: int | None, src: Any = None,
                ) -> tuple[list[Revision], Purged]:
        horizon = clock - self.spec.retention_ms
        stale = [k for k, _ in scan(self.expiry, partition_prefix(p), expiry_upto(p, horizon), p)]
        unmatched = 0
        for ek in stale:
            _, _, key, jid = split_expiry_key(ek)
            k = join_key(key, jid)
            raw = self.joins.get(k)
            if raw is not None:
                unmatched += Join.stored_revision(raw, self.np, self.nd) == 0
                del self.joins[k]
            del self.expiry[ek]
        return [], Purged(len(stale), unmatched, 0)

    def resume(self, p: int) -> list[Revision]:
        return []  # re-delivered records re-emit what they touched (module docstring)


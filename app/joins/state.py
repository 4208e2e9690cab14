"""Where a join's state lives: one row per join and one per dimension version, ordered by key
and event time; one set of rules (:mod:`app.logic.event_join`).

Every join spec keeps three tables (names from the spec, :class:`app.joins.spec.TableNames`):

- ``joins``: one row per dimension version under ``V (key, event_time, digest of the values)``
  -> ``[event_time, *values]`` (:mod:`app.joins.keys`): the version an event joins is one
  bounded reverse read (the last version before its time) and its tie group's rows; the next
  version after one is one forward read. A batch writes the versions it changes; the purge
  behind the horizon deletes all but the last version before it (tombstones). Why: the
  versions were one row per key, rewritten whole by every batch that changed the key: 6,000
  moods of 200 characters made a 1.3 MB row, past Kafka's 1 MB request limit (the worker
  exited on every restart), and every batch paid O(history) for the key;
- ``joins``, too: one row per join under ``J (key, event_time, join id)``,
  with two indexes in the same table: ``I (key, join id) -> event_time`` (a join by its id) and
  ``X (partition, time bucket, key)`` (which keys have joins in which ~17-minute bucket: the
  purge and the review are one range of it, then one range of each key's joins). Only ``J``
  rows go to the changelog; :class:`~app.joins.joins_table.JoinsTable` rebuilds the indexes
  from them on recovery, so an event costs one changelog row;
- ``clock``: partition -> stream time;
- ``dimension``: the layout before ``V`` rows, key -> ``[[event_time, *values], ...]``; still
  recovered (an older worker's changelog, an older bootstrap) and read once per key: a key
  found there is converted to ``V`` rows, and the old row tombstoned once the record that
  converted it is delivered (:meth:`app.joins.join_rows.JoinRows._convert`).

Why this layout, for every join: an event writes its own row, whatever its key's fan-in, and a
dimension version re-joins the events between it and the key's next version — one range read
(:func:`app.logic.histories.affected_until`). A key with 100,000 events in retention costs
what a key with one does. The layout before it kept the mood join's joins in one row per key
(every event rewrote the key's whole row: a consultant with ~10,000 joins passed the 1 MB
request limit and the worker failed stop on every restart) and the others' under
``(key, join id)`` (a version scanned all of its key's joins).

A re-delivered record re-emits what it touched, and writes its rows again: a duplicate event
its join's revisions, a duplicate version those of the joins that answer with it or have a
revision it made (superseded since, perhaps, by a version whose own re-delivery comes after
this one is committed: without them, a gap). Records re-delivered after a crash are exactly
those whose outputs may be lost, so nothing is lost and nothing is re-sent at scale. The rows
are written again because a store can hold rows of records whose changelog rows were lost with
a crashed process (found by the chaos run with producer batching: the next owner of the
partition, which recovers from the changelog, lacked them).

Gap-free re-emits: with a join's current revision go the revisions it superseded whose source
(``src``: the input record that produced it, stamped by the agent) is not known to be delivered
(``delivered(p, src)``); each join row carries them (:attr:`app.logic.event_join.Join.unsent`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.joins.join_rows import JoinRows
from app.joins.joins_table import hold_rows
from app.joins.keys import (
    BUCKET_MS,
    RELEASED,
    bucket,
    expiry_key,
    expiry_range,
    held_key,
    held_range,
    id_key,
    join_key,
    join_range,
    split_expiry_key,
    split_held_key,
    split_join_key,
    version_key,
)
from app.logic.event_join import (
    Event,
    Join,
    Purged,
    Revision,
    rejoin_affected,
    superseded_revisions,
    undelivered_revisions,
)
from app.logic.histories import Version, affected_floor, affected_until

__all__ = ["FinalJoinError", "JoinState"]


class FinalJoinError(ValueError):
    """An event re-uses the id of a join that is final (behind the horizon): revising it would
    break the finality promise, so the record goes to the dead letters with this reason."""


class JoinState(JoinRows):
    """One spec's state through the batch's overlays (module docstring): the rules' inputs (an
    event, a version, a late record, a tick), a bounded hold and finality, over the rows of
    :class:`~app.joins.join_rows.JoinRows`."""

    # --- a join's new revision, and the revisions to send (again) with it ---------------------
    def _settle(self, p: int, jid: str, key: str, j: Join, src: Any) -> list[Revision]:
        """``j`` has a new revision from ``src``: stamp it, drop its delivered superseded ones;
        the superseded ones that may be missing from the log and are not on their way there,
        to send (again) before the new one.

        Why they go now: a record re-delivered after a crash re-emits what it touched only when
        it changes nothing (the duplicate paths). One that makes a new revision — the stored
        join moved on since it was first handled, or a record the dead process never saw
        reaches the join first — supersedes revisions whose own records may then be handled
        again with no re-emit (they make a revision of their own, or were handled already),
        and nothing else sends them: the crash left them out of the log for good (a kill -9
        test: a join with revisions 3 and 4 and never 1 and 2, findings.md)."""
        if not j.unsent:
            j.source = src
            return []
        j.settle(src, lambda s: self.delivered(p, s))
        return [
            replace(r, again=True)
            for r in superseded_revisions(jid, key, j, lambda s: self.emitted(p, s))
        ]

    def unsent(self, p: int, jid: str, key: str, j: Join) -> list[Revision]:
        """What to re-emit for ``j``: its revisions that may be missing from the log and are
        not on their way there (a crash loses what is on its way: the restarted worker, which
        knows nothing of it, re-emits then)."""
        return [
            replace(r, again=True)
            for r in undelivered_revisions(self.rules, jid, key, j, lambda s: self.emitted(p, s))
        ]

    def _put(
        self, p: int, key: str, jid: str, j: Join, old_time: int | None, was_held: bool = False
    ) -> None:
        joins = self.joins
        t = j.event_time
        if old_time is not None and old_time != t:
            joins.delete(p, join_key(key, old_time, jid))
        joins.put(p, join_key(key, t, jid), self.dump(j))
        if old_time != t:
            joins.put(p, id_key(key, jid), t, local=True)
            xk = expiry_key(p, t, key)
            if joins.get(p, xk) is None:
                joins.put(p, xk, 1, local=True)
        if self.hold is not None:
            self._held_rows(p, key, jid, j, old_time, was_held)

    def _held_rows(
        self, p: int, key: str, jid: str, j: Join, old_time: int | None, was_held: bool
    ) -> None:
        """Keep the ``H`` index of a hold spec's join (app.joins.keys): a join held now has
        its row at its time; one held before and no more (answered by a version), or moved,
        loses the old one."""
        t = j.event_time
        if was_held and old_time is not None and (old_time != t or j.revision):
            self.joins.delete(p, held_key(p, old_time, key, jid), local=True)
        if old_time is not None and old_time != t and j.revision:  # a release moves with it
            rk = held_key(p, old_time, key, jid, RELEASED)
            src = self.joins.get(p, rk)
            if src is not None:
                self.joins.delete(p, rk, local=True)
                self.joins.put(p, held_key(p, t, key, jid, RELEASED), src, local=True)
        if j.revision == 0:
            self.joins.put(p, held_key(p, t, key, jid), 1, local=True)
            nxt = self._next_hold.get(p, -1)
            if nxt != -1 and (nxt is None or t < nxt):
                self._next_hold[p] = t

    # --- the rules' inputs -------------------------------------------------------------------
    def on_event(
        self, p: int, e: Event, horizon: int | None, release_from: int | None, src: Any = None
    ) -> tuple[list[Revision], bool]:
        old_time, raw = self._find(p, e.key, e.id)
        if (
            old_time is not None
            and horizon is not None
            and old_time < horizon
            and old_time != e.event_time
            and self.spec.final_topic is not None
        ):
            raise FinalJoinError(
                f"join {e.id} is final (its event time {old_time} is behind "
                f"the horizon {horizon}): an event re-using its id with time "
                f"{e.event_time} would revise it"
            )
        existing = None if raw is None else self.load(raw)
        j, rev = self.rules.arrive(
            self._answering(p, e.key, e.event_time, src),
            e,
            existing,
            release_from,
            self.stream_time(p),
        )
        if j is None:  # a duplicate: perhaps re-delivered after a crash lost its output
            if existing is None:
                return [], False
            assert old_time is not None  # a row found has its time
            self.joins.put(p, join_key(e.key, old_time, e.id), raw)  # its row again
            return self.unsent(p, e.id, e.key, existing), False
        out = [*self._settle(p, e.id, e.key, j, src), rev] if rev else []
        self._put(
            p,
            e.key,
            e.id,
            j,
            old_time,
            existing is not None and Join.stored_revision(raw, self.np, self.nd) == 0,
        )
        return out, (existing is None and j.revision == 0)

    def _answering(self, p: int, key: str, t: int, src: Any) -> list[Version]:
        """The versions an event at ``t`` can join (the tie group of the as-of time): what the
        rules see of the key's history for it — :func:`app.logic.histories.as_of` over them
        gives what it gives over the whole history."""
        self._convert(p, key, src)
        if self.rules.asof == "before":
            at = self._time_before(p, key, t)
        else:
            at = self._time_before(p, key, t + 1)
            if at is None:  # before every version: the earliest
                at = self._time_from(p, key, 0)
        return [] if at is None else self._group(p, key, at)

    def on_version(
        self,
        p: int,
        key: str,
        v: Version,
        horizon: int | None,
        release_from: int | None,
        src: Any = None,
    ) -> list[Revision]:
        self._convert(p, key, src)
        t = v[0]
        vk = version_key(key, t, v[1:])
        if self.joins.get(p, vk) is not None:  # a duplicate: perhaps re-delivered after a crash
            self.joins.put(p, vk, v)  # its row again (module docstring)
            return self._again(p, key, v, src)
        if horizon is not None and t < horizon:  # kept only if it is the last before it
            before = self._time_before(p, key, horizon)
            if before is not None and before >= t and max(self._group(p, key, before)) > v:
                return self._again(p, key, v, src)  # no effect, unless it is re-delivered
        # the first version at or after t, read before the write: none at t (a new key, a
        # version newer than the rest: the usual case) spares the reads of t's tie group and of
        # the next time, and, with none before t either, the purge's (each read is an
        # iterator of the store: a catalogue's replay paid five per movie where it pays three)
        first = self._time_from(p, key, t)
        self.joins.put(p, vk, v)
        prev = self._time_before(p, key, t)
        # rows before the horizon besides v itself need a version before t or a tie at t
        # (t < horizon: none lies in (t, horizon), the check above returned otherwise)
        if (
            horizon is not None
            and (prev is not None or first == t)
            and self._purge(p, key, horizon)
        ):
            prev = self._time_before(p, key, t)  # t < horizon: the purge took all before t
        rule = self.rules.asof
        if first == t:
            here, nxt = self._group(p, key, t), self._time_from(p, key, t + 1)
        else:  # nothing else at t, and the next time is the first read (the purge keeps it:
            here, nxt = [v], first  # it is at or after the horizon)
        window = (
            (self._group(p, key, prev) if prev is not None else [])
            + here
            + (self._group(p, key, nxt) if nxt is not None else [])
        )
        floor = affected_floor(window, v, rule, horizon)
        cands = self._joins_of(p, key, floor, affected_until(window, v, rule))
        held = {jid for jid, j in cands if j.revision == 0} if self.hold is not None else ()
        out: list[Revision] = []
        by_id = dict(cands)
        for rev in rejoin_affected(self.rules, window, key, v, cands, horizon, release_from):
            j = by_id[rev.id]
            out += self._settle(p, rev.id, key, j, src)
            out.append(rev)
            self._put(p, key, rev.id, j, j.event_time, rev.id in held)
        return out

    def on_late(
        self, p: int, key: str, src: Any, jid: str | None = None, v: Version | None = None
    ) -> list[Revision]:
        """A record late now (routed to the late topic, not joined) that may have been handled
        before a crash, when it was not late: the revisions it made that may be missing from
        the log and are not on their way, re-emitted (an event: ``jid``; a version: ``v``).
        Why: the recovered stream time can be past it (the batches a crash lost spanned the
        retention), and a late record is handled all the same: without this, nothing ever
        sent them. A record never handled before costs a lookup: its join by id, or its
        version's row (a version that made revisions was kept, or purged with them)."""
        if jid is not None:
            _, raw = self._find(p, key, jid)
            if raw is None:
                return []
            j = self.load(raw)
            if not j.made_by(src):
                return []
            return self.unsent(p, jid, key, j)
        assert v is not None
        if self.joins.get(p, version_key(key, v[0], v[1:])) is None:
            return []
        return self._again(p, key, v, src, answering=False)

    def _again(
        self, p: int, key: str, v: Version, src: Any, answering: bool = True
    ) -> list[Revision]:
        """A version seen before, or too old to change anything: re-emit (and write again) the
        joins that answer with it (unless not ``answering``: a late record, :meth:`on_late`)
        and those with a revision it made (``src``), current or superseded. The latter matter:
        once this record is acked and committed, the revisions it made count as delivered, and
        a later version may have taken over the join's answer before the crash (the chaos run
        found the gap: revision 1 never sent). Only joins at or after the first time ``v``
        could ever answer are read: after ``v`` (``before``); every one of the key's
        otherwise, since ``v`` answered the events before it while it was the earliest, and an
        earlier version may have taken them over since (tests/unit/test_crash_gaps.py: a
        rating's revision 1 never sent)."""
        out: list[Revision] = []
        start = v[0] + 1 if self.rules.asof == "before" else None
        joins = self._joins_of(p, key, start, None)
        if start is not None and src is not None:
            # before v too, the joins with a revision v made: v answered none of them, but one
            # may have been after v then and moved since (an event re-using its id with an
            # earlier time): found nowhere else, its revision was never sent again, and once v
            # was acked it counted as delivered (tests/unit/test_crash_gaps.py: a revision 2
            # missing). A row is checked before it is decoded; duplicates only pay this.
            joins = self._joins_made_by(p, key, src, None, start) + joins
        for jid, j in joins:
            if j.made_by(src) or (answering and j.answer_time == v[0] and j.answer == v[1:]):
                self.joins.put(p, join_key(key, j.event_time, jid), self.dump(j))
                if self.rules.current(jid, key, j) is not None:
                    out += self.unsent(p, jid, key, j)
        return out

    def on_tick(
        self,
        p: int,
        clock: int,
        release_from: int | None,
        src: Any = None,
        keep_from: int | None = None,
    ) -> tuple[list[Revision], Purged]:
        """Purge the joins behind the horizon (final) and the versions their keys no longer
        need; review the recent ones if the spec asks for it (``review_lag_ms``: a safety
        net, since versions re-join at once). ``keep_from``: purge no join at or after it
        (emit=final: a join stays until its final revision is delivered)."""
        horizon = clock - self.spec.retention_ms
        joins = self.joins
        purge_before = horizon if keep_from is None else min(horizon, keep_from)
        lo, hi = expiry_range(p, None, purge_before)
        purged = unmatched = 0
        aged: set[str] = set()
        for xk, _ in list(joins.scan(p, lo, hi)):
            _, start, key = split_expiry_key(xk)
            end = start + BUCKET_MS
            for jk, raw in list(joins.scan(p, *join_range(key, start, min(end, purge_before)))):
                _, t, jid = split_join_key(jk)
                never = Join.stored_revision(raw, self.np, self.nd) == 0
                unmatched += never
                purged += 1
                joins.delete(p, jk)
                if self.hold is not None:
                    for hk, _, _ in hold_rows(p, key, t, jid, None, self.np, self.nd):
                        joins.delete(p, hk, local=True)
                if joins.get(p, id_key(key, jid)) == t:
                    joins.delete(p, id_key(key, jid), local=True)
            if end <= purge_before:  # the whole bucket is behind the horizon
                joins.delete(p, xk, local=True)
            aged.add(key)
        versions = 0
        for key in aged:  # keys that aged: their old versions too
            self._convert(p, key, src)
            versions += self._purge(p, key, horizon)
        out: list[Revision] = []
        lag = self.spec.review_lag_ms
        if lag is not None:
            review_from = max(clock - lag, horizon)
            lo, hi = expiry_range(p, bucket(review_from), None)
            for xk, _ in list(joins.scan(p, lo, hi)):
                _, start, key = split_expiry_key(xk)
                for jid, j in self._joins_of(p, key, max(start, review_from), start + BUCKET_MS):
                    t = j.event_time
                    was_held = j.revision == 0
                    rev = self.rules.rejoin(
                        jid, key, j, self._answering(p, key, t, src), "revisit", release_from
                    )
                    if rev:
                        out += self._settle(p, jid, key, j, src)
                        self._put(p, key, jid, j, t, was_held)
                        out.append(rev)
        return out, Purged(purged, unmatched, versions)

    # --- a bounded hold (``hold_ms``) -------------------------------------------------------
    def release_holds(self, p: int, clock: int, src: Any = None) -> list[Revision]:
        """Answer the joins of ``p`` whose hold ended at stream time ``clock`` (event time +
        hold <= clock), oldest first, as ``left`` answers (cause ``hold-end``). Called for
        every record before it is joined, so a version that comes after the stream time
        passed an event's bound does not join its first answer, replay or not. Cost per
        record: a dict lookup and a comparison (the first hold's time is read once per
        batch); a release is one range of the ``H`` index."""
        hold = self.hold
        if hold is None:
            return []
        nxt = self._next_hold.get(p, -1)
        if nxt == -1:
            nxt = self._next_hold[p] = self._first_held(p)
        if nxt is None or nxt + hold > clock:
            return []
        out: list[Revision] = []
        joins = self.joins
        for hk, _ in list(joins.scan(p, *held_range(p, None, clock - hold + 1))):
            _, t, key, jid = split_held_key(hk)
            joins.delete(p, hk, local=True)
            raw = joins.get(p, join_key(key, t, jid))
            if raw is None:
                continue
            j = self.load(raw)
            rev = self.rules.release(jid, key, j, self._answering(p, key, t, src))
            if rev is None:
                continue
            out += self._settle(p, jid, key, j, src)
            self._put(p, key, jid, j, t)
            joins.put(p, held_key(p, t, key, jid, RELEASED), src, local=True)
            out.append(rev)
        self._next_hold[p] = self._first_held(p)
        return out

    def _first_held(self, p: int) -> int | None:
        row = self.joins.edge(p, *held_range(p, None, None))
        return None if row is None else split_held_key(row[0])[1]

    def released_unsent(self, p: int, clock: int) -> list[Revision]:
        """A tick: the revisions that ended holds and may have been lost with a crash (their
        ``R`` rows, app.joins.keys), re-emitted when they are not on their way from this
        process; an ``R`` row goes once its revision is known delivered."""
        if self.hold is None:
            return []
        out: list[Revision] = []
        joins = self.joins
        for rk, src in list(joins.scan(p, *held_range(p, None, None, RELEASED))):
            _, t, key, jid = split_held_key(rk)
            raw = joins.get(p, join_key(key, t, jid))
            if raw is None or src is None or self.delivered(p, src):
                joins.delete(p, rk, local=True)
                continue
            if not self.emitted(p, src):
                j = self.load(raw)
                out += self.unsent(p, jid, key, j)
                joins.put(p, join_key(key, t, jid), raw)  # its row again (module docstring)
        return out

    # --- finality (app.logic.finality) ------------------------------------------------------
    def final_revisions(self, p: int, lo: int | None, hi: int) -> list[Revision]:
        """The current revisions of the emitted joins of ``p`` with ``lo <= event time < hi``
        (emit=final: the joins a promise makes final), by bucket then key then time."""
        out: list[Revision] = []
        for xk, _ in list(
            self.joins.scan(p, *expiry_range(p, None if lo is None else bucket(lo), hi))
        ):
            _, start, key = split_expiry_key(xk)
            first = start if lo is None else max(start, lo)
            for jid, j in self._joins_of(p, key, first, min(start + BUCKET_MS, hi)):
                rev = self.rules.current(jid, key, j)
                if rev is not None:
                    out.append(rev)
        return out

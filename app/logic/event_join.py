"""The event-time join of any join spec, as pure functions (no Faust, no clock).

An *event* (a recommendation, a rating) joins the *version* of its key's dimension (a mood, a
movie) that was in force at the event's time, by one of two as-of rules:

- ``before``: the version with the greatest event time strictly before the event; none → null.
  (moods × recommendations, docs/concepts/event-time.md)
- ``at-or-before-else-earliest``: the greatest event time at or before the event's; an event that
  predates every version takes the earliest one. (movies × ratings)

Ties on a version's event time are broken by the greatest copied values, so a history sorted
ascending by ``[event_time, *values]`` has the tie rule built in (for the mood join: two moods
stamped with the same millisecond → the greatest mood string; the batch twin orders the same).

Mode ``left`` emits every event at once (answer null while unknown); mode ``inner`` *holds* an
event (stored, revision 0, nothing emitted) until a version applies, then emits revision 1.

An *end* (a tombstone on the dimension topic: :func:`app.logic.histories.end`) is a version with
no values: an event it applies to answers as if no version were known (``left``: null;
``inner``: held). A late end that takes the answer of a join already emitted corrects it to
null like any late version corrects it, in ``inner`` mode too: a revision log cannot take a
revision back, so an ``inner`` join's null answer is its retraction (a consumer drops the id).
A *bounded hold* (``left`` with ``hold_ms``) is the middle: an event with no applicable version
is held like ``inner`` holds it, but only while its partition's stream time is before
``event_time + hold_ms`` (:meth:`JoinRules.holds`); then :meth:`JoinRules.release` answers it
as ``left`` would have (cause ``hold-end``), and later versions correct it as ever. The bound
is in stream time, not wall time, so a replay holds and releases the same events.

Shapes:
- a version: ``[event_time, value, ...]`` (JSON list, as stored; histories are sorted lists)
- a join in state: :class:`Join`; :meth:`Join.to_json` is the stored layout
  ``[event_time, *payload, *answer, answer_time, revision, cause, *previous]`` — for the mood
  spec exactly A's ``recent-joins`` layout — followed, once the engine tracks delivery, by
  ``source`` and ``unsent`` (:class:`Join`).

Gap-free revision logs: a revision is saved in state (its changelog row) before its output is
sent, so a crash can leave revision n in state and not in the topic. If revision n+1 supersedes
it before the restarted worker re-emits it, re-emitting only the current revision leaves n
missing. So a join keeps, next to its current revision, the revisions it superseded whose
output is not known to be delivered (:attr:`Join.unsent`, each with the *source* — which input
record produced it — the engine stamps); :func:`unsent_revisions` is what to re-emit. Which
sources are delivered is the engine's knowledge (input records it saw the broker take the
outputs of, committed input offsets), passed in as a predicate: this module has no clock and
no broker.

A key's versions, their order and the as-of rules over them: :mod:`app.logic.histories`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.logic.histories import AsOf, Version, affected_floor, as_of, insert_version, purge_history

Cause = Literal["arrival", "late-dimension", "revisit", "backfill", "hold-end"]
Mode = Literal["left", "inner"]

CAUSES: tuple[Cause, ...] = ("arrival", "late-dimension", "revisit", "backfill", "hold-end")
MODES: tuple[Mode, ...] = ("left", "inner")

#: separator of the derived join id (cannot appear in ordinary text fields)
_ID_SEP = "\x1f"


def derive_id(values: Iterable[Any]) -> str:
    """A deterministic join id from what identifies an event (a replay derives the same).

    For the mood spec: (consultant, event_time, recommendation); the batch twin
    (:mod:`app.batch.mood_joins`) derives the same, and the oracle (tests/oracle.py) checks it.
    """
    raw = _ID_SEP.join(str(v) for v in values).encode("utf-8")
    return "r-" + hashlib.sha1(raw).hexdigest()[:20]


# --- joins ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Join:
    """One event as held in state, with its current answer and revision bookkeeping."""

    event_time: int
    payload: list[Any]  # the event's copied fields besides key, id and event time (spec order)
    answer: list[Any] | None  # the joined version's copied values; None: no version applies
    answer_time: int | None
    revision: int  # 0: held (inner mode), never emitted
    cause: Cause
    previous: list[Any] | None = None  # revision - 1's answer, so a re-emit is identical
    #: which input record produced the current revision (opaque to the rules; the engine's
    #: ``[input, offset]``); None: unknown (a row from before sources were kept), delivered
    source: Any = None
    #: superseded revisions whose output may not be delivered yet, oldest first, each
    #: ``[source, revision, cause, event_time, payload, answer, answer_time, previous]``
    unsent: list[list[Any]] = field(default_factory=list)

    def to_json(self, n_dim: int) -> list[Any]:
        none = [None] * n_dim
        row = [
            self.event_time,
            *self.payload,
            *(self.answer or none),
            self.answer_time,
            self.revision,
            self.cause,
            *(self.previous or none),
        ]
        if self.unsent:
            row += [self.source, self.unsent]
        elif self.source is not None:
            row.append(self.source)
        return row

    def supersede(self) -> None:
        """The current revision is about to be replaced: keep it until it is known delivered."""
        self.unsent.append(
            [
                self.source,
                self.revision,
                self.cause,
                self.event_time,
                self.payload,
                self.answer,
                self.answer_time,
                self.previous,
            ]
        )

    def made_by(self, source: Any) -> bool:
        """Whether input ``source`` made a revision of this join still held: the current one
        or a superseded one not known delivered (what a re-delivered record must send again)."""
        return source is not None and (
            self.source == source or any(u[0] == source for u in self.unsent)
        )

    def settle(self, source: Any, delivered: Callable[[Any], bool]) -> None:
        """A new revision from input ``source`` was made: stamp it, forget delivered ones."""
        self.source = source
        if self.unsent:
            self.unsent = [u for u in self.unsent if not delivered(u[0])]

    @staticmethod
    def stored_revision(raw: Sequence[Any], n_payload: int, n_dim: int) -> int:
        """The revision of a stored join without decoding it (0: held)."""
        return raw[2 + n_payload + n_dim]

    @classmethod
    def from_json(cls, raw: Sequence[Any], n_payload: int, n_dim: int) -> Join:
        p, d = 1 + n_payload, 1 + n_payload + n_dim
        answer_time = raw[d]
        previous = list(raw[d + 3 : d + 3 + n_dim]) or [None] * n_dim  # older states had none
        tail = d + 3 + n_dim
        return cls(
            raw[0],
            list(raw[1:p]),
            None if answer_time is None else list(raw[p:d]),
            answer_time,
            raw[d + 1],
            raw[d + 2],
            None if all(v is None for v in previous) else previous,
            raw[tail] if len(raw) > tail else None,
            [list(u) for u in raw[tail + 1]] if len(raw) > tail + 1 else [],
        )


# Event and Revision are made once per record on a worker's hot path: plain slotted classes
# (a frozen dataclass sets each field through ``object.__setattr__``, ~3x the cost); nothing
# changes them after they are made.
@dataclass(slots=True)
class Event:
    """An event as the logic sees it: its key, join id, time and copied payload."""

    key: str
    id: str
    event_time: int
    payload: tuple[Any, ...] = ()


@dataclass(slots=True)
class Revision:
    """One record of a spec's output revision log (the spec names the wire fields)."""

    id: str
    key: str
    event_time: int
    payload: tuple[Any, ...]
    answer: tuple[Any, ...] | None
    answer_time: int | None
    revision: int
    previous: tuple[Any, ...] | None
    cause: Cause
    #: a repeat of a revision emitted before (re-emitted for a re-delivered record): if the
    #: broker refuses it for good, the record that triggered the repeat is not to blame
    again: bool = False
    #: the input record that made it, as the engine stamped it (:attr:`Join.source`), when it
    #: is not the record being handled: a re-emit, a join's current revision; None: the
    #: record being handled made it (lineage: the agent names it on the wire)
    source: Any = None

    @property
    def result(self) -> tuple[Any, ...]:
        """What a consumer compares: everything but the bookkeeping fields."""
        return (self.id, self.key, self.event_time, self.payload, self.answer, self.answer_time)


def _revision(jid: str, key: str, j: Join) -> Revision:
    return Revision(
        jid,
        key,
        j.event_time,
        tuple(j.payload),
        None if j.answer is None else tuple(j.answer),
        j.answer_time,
        j.revision,
        None if j.previous is None else tuple(j.previous),
        j.cause,
    )


@dataclass(frozen=True, slots=True)
class JoinRules:
    """The rules of one spec: its as-of rule, mode and bounded hold. Every method is pure."""

    asof: AsOf = "before"
    mode: Mode = "left"
    #: ``left`` only: hold an event with no applicable version while stream time is before
    #: ``event_time + hold_ms`` (None: no hold, answer at once)
    hold_ms: int | None = None
    #: an event's last payload value numbers the versions of its id (a join fed by another
    #: join: the upstream's ``revision``): an id's event numbered lower than the one held is
    #: an older revision come again, and changes nothing (:meth:`arrive`)
    ordered: bool = False

    def holds(self, event_time: int, clock: int | None) -> bool:
        """Is an unanswered event at ``event_time`` still within its hold at stream time
        ``clock`` (None: unknown, the event's own time)? Always False without a hold."""
        hold = self.hold_ms
        if hold is None:
            return False
        return event_time + hold > (event_time if clock is None else clock)

    def release(
        self, jid: str, key: str, j: Join, history: Sequence[Version], cause: Cause = "hold-end"
    ) -> Revision | None:
        """A held join whose hold ended: its first revision, with whatever answer applies now
        (normally none: a version that came within the hold released it already). None when
        ``j`` is not held."""
        if j.revision != 0:
            return None
        j.answer, j.answer_time = self.answer(history, j.event_time)
        j.previous = None
        j.revision = 1
        j.cause = cause
        return _revision(jid, key, j)

    def answer(self, history: Sequence[Version], t: int) -> tuple[list[Any] | None, int | None]:
        """(the copied values, the version's time) an event at ``t`` answers with; (None,
        None) when no version applies or the one that does is an end (a tombstone: as if no
        version were known, :mod:`app.logic.histories`)."""
        v = as_of(history, t, self.asof)
        return (None, None) if v is None or len(v) == 1 else (list(v[1:]), v[0])

    def arrive(
        self,
        history: Sequence[Version],
        event: Event,
        existing: Join | None,
        release_from: int | None = None,
        clock: int | None = None,
    ) -> tuple[Join | None, Revision | None]:
        """An event arrives: (the join to store, or None when state is unchanged; what to emit).

        A duplicate with the same content changes nothing. ``release_from``: in inner mode, an
        event older than this is not emitted even when a version applies (the emit window).
        ``clock``: the partition's stream time, for a bounded hold (:meth:`holds`).

        An :attr:`ordered` spec's events are revisions of an upstream join: one numbered lower
        than the event held is an older revision re-sent after a newer one (an upstream
        worker's re-send after a crash, a hop's at-least-once copy) and changes nothing; one
        numbered higher that changes nothing this join reads keeps its number, with no
        revision (the number is no answer: a revision is made only when the answer changes).
        """
        if existing is not None and self.ordered:
            number, held = event.payload[-1], existing.payload[-1]
            if number < held:
                return None, None
            if (
                number > held
                and existing.event_time == event.event_time
                and existing.payload[:-1] == list(event.payload[:-1])
            ):
                existing.payload[-1] = number
                return existing, None
        if existing is not None:
            # compared before the rejoin: a held join's rejoin moves it without a revision
            same = (existing.event_time, existing.payload) == (
                event.event_time,
                list(event.payload),
            )
            rev = self.rejoin(
                event.id,
                event.key,
                existing,
                history,
                "arrival",
                release_from,
                event.event_time,
                list(event.payload),
            )
            return (existing if rev or not same else None), rev
        answer, answer_time = self.answer(history, event.event_time)
        held = answer is None and (self.mode == "inner" or self.holds(event.event_time, clock))
        if (
            not held
            and self.mode == "inner"
            and release_from is not None
            and event.event_time < release_from
        ):
            held = True
        j = Join(
            event.event_time, list(event.payload), answer, answer_time, 0 if held else 1, "arrival"
        )
        return j, None if held else _revision(event.id, event.key, j)

    def rejoin(
        self,
        jid: str,
        key: str,
        j: Join,
        history: Sequence[Version],
        cause: Cause,
        release_from: int | None = None,
        event_time: int | None = None,
        payload: list[Any] | None = None,
    ) -> Revision | None:
        """Recompute ``j`` (in place); a revision only when what it says changed.

        A held join whose answer is still None stays held; one older than ``release_from``
        stays held too (it will be counted as unmatched when it is purged).
        """
        new_time = j.event_time if event_time is None else event_time
        new_payload = j.payload if payload is None else payload
        answer, answer_time = self.answer(history, new_time)
        if j.revision == 0 and (
            answer is None or (release_from is not None and new_time < release_from)
        ):
            j.event_time, j.payload = new_time, new_payload  # still held: nothing to emit
            return None
        if (new_time, new_payload, answer, answer_time) == (
            j.event_time,
            j.payload,
            j.answer,
            j.answer_time,
        ) and j.revision:
            return None
        if j.revision:
            j.supersede()
        j.previous = j.answer if j.revision else None
        j.event_time, j.payload, j.answer, j.answer_time = (
            new_time,
            new_payload,
            answer,
            answer_time,
        )
        j.revision += 1
        j.cause = cause
        return _revision(jid, key, j)

    def current(self, jid: str, key: str, j: Join) -> Revision | None:
        """The latest emitted revision of ``j``, exactly as emitted (None if held), with the
        record that made it."""
        if not j.revision:
            return None
        rev = _revision(jid, key, j)
        rev.source = j.source
        return rev


# --- one key's whole state (what the property tests and the batch side drive) -----------------


@dataclass(slots=True)
class KeyState:
    """Everything a join keeps for one key: dimension history and recent joins."""

    history: list[Version] = field(default_factory=list)  # sorted by [event_time, *values]
    joins: dict[str, Join] = field(default_factory=dict)  # join id -> Join


def add_event(
    rules: JoinRules,
    state: KeyState,
    event: Event,
    release_from: int | None = None,
    clock: int | None = None,
) -> tuple[bool, list[Revision]]:
    """Join an event on arrival; returns (joins changed, revisions)."""
    j, rev = rules.arrive(state.history, event, state.joins.get(event.id), release_from, clock)
    if j is None:
        return False, []
    state.joins[event.id] = j
    return True, [rev] if rev else []


def add_version(
    rules: JoinRules,
    state: KeyState,
    key: str,
    version: Version,
    final_before: int | None = None,
    release_from: int | None = None,
) -> tuple[bool, list[Revision]]:
    """Record a version and re-join, at once, the joins it may change.

    Joins older than ``final_before`` (the retention horizon) are final and left alone.
    Returns whether the history changed (False for a duplicate) and the revisions.
    """
    if not insert_version(state.history, version):
        return False, []
    return True, list(
        rejoin_affected(
            rules, state.history, key, version, state.joins.items(), final_before, release_from
        )
    )


def rejoin_affected(
    rules: JoinRules,
    history: Sequence[Version],
    key: str,
    version: Version,
    joins: Iterable[tuple[str, Join]],
    final_before: int | None = None,
    release_from: int | None = None,
) -> Iterator[Revision]:
    """Re-join those of ``joins`` that ``version`` (already in ``history``) may change."""
    floor = affected_floor(history, version, rules.asof, final_before)
    for jid, j in joins:
        if floor is None or j.event_time >= floor:
            rev = rules.rejoin(jid, key, j, history, "late-dimension", release_from)
            if rev:
                yield rev


def release_held(rules: JoinRules, state: KeyState, key: str, clock: int) -> list[Revision]:
    """Answer the held joins whose hold ended at stream time ``clock``, oldest first."""
    out = []
    for jid, j in sorted(state.joins.items(), key=lambda item: item[1].event_time):
        if j.revision == 0 and not rules.holds(j.event_time, clock):
            rev = rules.release(jid, key, j, state.history)
            if rev:
                out.append(rev)
    return out


@dataclass(frozen=True, slots=True)
class Purged:
    """What a revisit dropped: joins (of which never emitted: unmatched) and versions."""

    joins: int = 0
    unmatched: int = 0
    versions: int = 0


def revisit(
    rules: JoinRules,
    state: KeyState,
    key: str,
    review_from: int | None,
    horizon: int,
    release_from: int | None = None,
) -> tuple[list[Revision], Purged]:
    """Re-check joins at or after ``review_from`` (None: none), then purge behind ``horizon``.

    Joins before the horizon are final and dropped (a held one is counted as unmatched);
    versions before it are dropped but the last.
    """
    revisions = []
    if review_from is not None:
        for jid, j in state.joins.items():
            if j.event_time >= review_from:
                rev = rules.rejoin(jid, key, j, state.history, "revisit", release_from)
                if rev:
                    revisions.append(rev)
    stale = [jid for jid, j in state.joins.items() if j.event_time < horizon]
    unmatched = sum(1 for jid in stale if state.joins[jid].revision == 0)
    for jid in stale:
        del state.joins[jid]
    before = len(state.history)
    state.history = purge_history(state.history, horizon)
    return revisions, Purged(len(stale), unmatched, before - len(state.history))


def current_revisions(
    rules: JoinRules, state: KeyState, key: str, delivered: Callable[[Any], bool] | None = None
) -> Iterator[Revision]:
    """Every emitted join's revisions that may be missing from the log, as they were emitted
    (re-emit after recovery): its :func:`unsent_revisions`, or only the latest revision when
    ``delivered`` is None."""
    for jid, j in state.joins.items():
        yield from unsent_revisions(rules, jid, key, j, delivered)


def superseded_revisions(
    jid: str, key: str, j: Join, delivered: Callable[[Any], bool]
) -> list[Revision]:
    """The revisions ``j`` superseded whose source is not ``delivered``, oldest first, exactly
    as they were emitted, each with the record that made it."""
    return [
        Revision(
            jid,
            key,
            u[3],
            tuple(u[4]),
            None if u[5] is None else tuple(u[5]),
            u[6],
            u[1],
            None if u[7] is None else tuple(u[7]),
            u[2],
            source=u[0],
        )
        for u in j.unsent
        if not delivered(u[0])
    ]


def unsent_revisions(
    rules: JoinRules, jid: str, key: str, j: Join, delivered: Callable[[Any], bool] | None = None
) -> list[Revision]:
    """What to re-emit for ``j`` after a crash: the superseded revisions whose source is not
    ``delivered`` (oldest first), then the current one. Re-emitting a revision that did reach
    the log repeats it (same number, same answer); skipping one that did not leaves a gap."""
    out = [] if delivered is None else superseded_revisions(jid, key, j, delivered)
    rev = rules.current(jid, key, j)
    return out + [rev] if rev else out


def undelivered_revisions(
    rules: JoinRules, jid: str, key: str, j: Join, delivered: Callable[[Any], bool]
) -> list[Revision]:
    """What a re-delivered record re-emits for ``j``: :func:`unsent_revisions`, but the
    current revision only when its own source is not known ``delivered`` (a source of None
    counts as delivered). A duplicate arriving long after its original was delivered re-emits
    nothing; one re-delivered after a crash re-emits what may be missing."""
    out = unsent_revisions(rules, jid, key, j, delivered)
    if j.revision and delivered(j.source):
        return out[:-1]
    return out

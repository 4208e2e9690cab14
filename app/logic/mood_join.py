"""The mood join as a pure state machine over one consultant's state.

Each function takes the consultant's state (mood history + recent joins), changes it in place and
returns the revisions to emit. The Faust agent only loads/stores the state and sends what comes
back; the property tests drive these functions directly with shuffled arrival orders.

Invariants:
- ``moods`` is sorted by (event_time, mood); see :mod:`app.logic.asof` for the tie rule.
- a join's ``revision`` only grows, and a revision is returned only when the answer changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

from app.logic.asof import MoodPoint, insert_mood, join_id, mood_as_of, purge_moods

Cause = Literal["arrival", "late-dimension", "revisit", "backfill"]


@dataclass(frozen=True, slots=True)
class Mood:
    name: str
    mood: str
    event_time: int


@dataclass(frozen=True, slots=True)
class Recommendation:
    consultant: str
    recommendation: str
    event_time: int
    id: str | None = None

    @property
    def join_id(self) -> str:
        return join_id(self.consultant, self.event_time, self.recommendation, self.id)


@dataclass(slots=True)
class Join:
    """A recent join as held in state: the recommendation plus its current answer."""

    event_time: int
    recommendation: str
    mood: str | None
    mood_event_time: int | None
    revision: int
    cause: Cause
    previous_mood: str | None = None  # what revision - 1 said, so a re-emit is identical

    def to_json(self) -> list[Any]:
        return [self.event_time, self.recommendation, self.mood, self.mood_event_time,
                self.revision, self.cause, self.previous_mood]

    @classmethod
    def from_json(cls, raw: list[Any]) -> "Join":
        return cls(*raw)


@dataclass(frozen=True, slots=True)
class Revision:
    """One record of the output revision log (DESIGN §1, ``etj-mood-recommendations``)."""

    id: str
    consultant: str
    event_time: int
    recommendation: str
    mood: str | None
    mood_event_time: int | None
    revision: int
    previous_mood: str | None
    cause: Cause

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "consultant": self.consultant,
            "event_time": self.event_time,
            "recommendation": self.recommendation,
            "mood": self.mood,
            "mood_event_time": self.mood_event_time,
            "revision": self.revision,
            "previous_mood": self.previous_mood,
            "cause": self.cause,
        }

    @property
    def answer(self) -> tuple[Any, ...]:
        """What a consumer compares: everything but the bookkeeping fields."""
        return (self.id, self.consultant, self.event_time, self.recommendation, self.mood,
                self.mood_event_time)


@dataclass(slots=True)
class ConsultantState:
    """Everything the join keeps for one consultant (one table key)."""

    moods: list[MoodPoint] = field(default_factory=list)  # [(event_time, mood)], sorted
    joins: dict[str, Join] = field(default_factory=dict)  # join id -> Join


def _rejoin(consultant: str, jid: str, j: Join, moods: list[MoodPoint], cause: Cause,
            event_time: int | None = None,
            recommendation: str | None = None) -> Revision | None:
    """Recompute one join; bump its revision and return it only if the output changed."""
    new_time = j.event_time if event_time is None else event_time
    new_rec = j.recommendation if recommendation is None else recommendation
    mood, mood_time = mood_as_of(moods, new_time)
    if (new_time, new_rec, mood, mood_time) == (j.event_time, j.recommendation, j.mood,
                                                 j.mood_event_time):
        return None
    previous = j.mood
    j.event_time, j.recommendation, j.mood, j.mood_event_time = new_time, new_rec, mood, mood_time
    j.revision += 1
    j.cause = cause
    j.previous_mood = previous
    return Revision(jid, consultant, new_time, new_rec, mood, mood_time, j.revision, previous, cause)


def add_recommendation(state: ConsultantState, rec: Recommendation) -> list[Revision]:
    """Join on arrival (best effort). A duplicate with the same answer emits nothing."""
    jid = rec.join_id
    existing = state.joins.get(jid)
    if existing is not None:
        rev = _rejoin(rec.consultant, jid, existing, state.moods, "arrival",
                      rec.event_time, rec.recommendation)
        return [rev] if rev else []
    mood, mood_time = mood_as_of(state.moods, rec.event_time)
    state.joins[jid] = Join(rec.event_time, rec.recommendation, mood, mood_time, 1, "arrival")
    return [Revision(jid, rec.consultant, rec.event_time, rec.recommendation, mood, mood_time, 1,
                     None, "arrival")]


def add_mood(state: ConsultantState, mood: Mood) -> tuple[bool, list[Revision]]:
    """Record a mood and re-join, at once, the recent joins it may change (those after it).

    Returns whether the mood history changed (False for a duplicate) and the corrections.
    """
    if not insert_mood(state.moods, (mood.event_time, mood.mood)):
        return False, []
    revisions = []
    for jid, j in state.joins.items():
        if j.event_time > mood.event_time:
            rev = _rejoin(mood.name, jid, j, state.moods, "late-dimension")
            if rev:
                revisions.append(rev)
    return True, revisions


def revisit(state: ConsultantState, consultant: str, review_from: int, horizon: int,
            ) -> tuple[list[Revision], int, int]:
    """Re-check recent joins, then finalise and purge what fell behind the retention horizon.

    ``review_from``: joins at or after this event time are re-checked (the review window).
    ``horizon``: joins before it are final and dropped; moods before it are dropped but the last.
    Returns (corrections, joins dropped, moods dropped).
    """
    revisions = []
    for jid, j in state.joins.items():
        if j.event_time >= review_from:
            rev = _rejoin(consultant, jid, j, state.moods, "revisit")
            if rev:
                revisions.append(rev)
    stale = [jid for jid, j in state.joins.items() if j.event_time < horizon]
    for jid in stale:
        del state.joins[jid]
    before = len(state.moods)
    state.moods = purge_moods(state.moods, horizon)
    return revisions, len(stale), before - len(state.moods)


def current_revisions(state: ConsultantState, consultant: str) -> Iterable[Revision]:
    """The latest revision of every recent join, exactly as it was emitted.

    Used to re-emit after recovery: an output lost in a crash after its state was saved comes
    back; a consumer that already saw it gets the same revision number with the same answer.
    """
    for jid, j in state.joins.items():
        yield Revision(jid, consultant, j.event_time, j.recommendation, j.mood,
                       j.mood_event_time, j.revision, j.previous_mood, j.cause)


def exact_mood_joins(moods: Iterable[Mood], recs: Iterable[Recommendation],
                     ) -> dict[str, tuple[Any, ...]]:
    """Brute-force reference answer: join id -> Revision.answer. Order of input is irrelevant.

    Quadratic on purpose: it is the oracle the incremental join is checked against.
    """
    by_name: dict[str, set[MoodPoint]] = {}
    for m in moods:
        by_name.setdefault(m.name, set()).add((m.event_time, m.mood))
    out: dict[str, tuple[Any, ...]] = {}
    for r in recs:
        before = [p for p in by_name.get(r.consultant, ()) if p[0] < r.event_time]
        best = max(before) if before else (None, None)
        out[r.join_id] = (r.join_id, r.consultant, r.event_time, r.recommendation, best[1],
                          best[0])
    return out

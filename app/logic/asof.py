"""The as-of rule of the mood join, in one place so stream, batch and tests cannot drift apart.

Rule (DESIGN §2): a recommendation at time ``t`` joins the consultant's mood with the greatest
``event_time`` strictly less than ``t``. Ties on mood event time (two different moods stamped
with the same millisecond) are broken by taking the lexicographically greatest mood string, so
the answer never depends on arrival order. The batch twin orders by ``(event_time, mood)`` too.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, insort
from typing import Sequence

MoodPoint = tuple[int, str]  # (event_time, mood), kept sorted ascending = tie rule built in

#: separator for the derived join id; cannot appear in ordinary text fields
_ID_SEP = "\x1f"


def join_id(consultant: str, event_time: int, recommendation: str, given: str | None) -> str:
    """The join id: the recommendation's own ``id``, else a digest of what identifies it.

    Deterministic, so a replay (or the batch twin) derives the same id for the same record.
    """
    if given:
        return given
    raw = _ID_SEP.join((consultant, str(event_time), recommendation)).encode("utf-8")
    return "r-" + hashlib.sha1(raw).hexdigest()[:20]


def mood_as_of(moods: Sequence[MoodPoint], t: int) -> tuple[str | None, int | None]:
    """The mood in force just before ``t``: greatest (event_time, mood) with event_time < t."""
    i = bisect_left(moods, (t, ""))  # first point with event_time >= t
    if i == 0:
        return None, None
    event_time, mood = moods[i - 1]
    return mood, event_time


def insert_mood(moods: list[MoodPoint], point: MoodPoint) -> bool:
    """Insert keeping order; False when the exact point is already there (a duplicate)."""
    i = bisect_left(moods, point)
    if i < len(moods) and moods[i] == point:
        return False
    insort(moods, point)
    return True


def purge_moods(moods: list[MoodPoint], horizon: int) -> list[MoodPoint]:
    """Drop moods before ``horizon`` but the last one: a later recommendation may still need it."""
    i = bisect_left(moods, (horizon, ""))
    return moods[max(i - 1, 0):]

"""One key's dimension versions (its *history*), sorted: the order (``[event_time, *copied
values]`` ascending, so ties on a time are broken by the greatest values), the as-of rules over
it (:func:`as_of`: which version an event joins), the purge behind the horizon, and which events
a new version may change (:func:`affected_from`, :func:`affected_until`). Pure, like the rest of
:mod:`app.logic`; the rules are told in :mod:`app.logic.event_join`.

An *end* (:func:`end`: a tombstone on the dimension topic, at its Kafka timestamp) is a version
too, ``[event_time]`` with no values: "no value known from here". Being a version, every rule
above treats it as one (the as-of search, which events it changes, the purge, the changelog,
the batch twin's order), and only the answer reads it differently: an event whose as-of
version is an end has no answer, as if no version were known (:func:`is_end`). Why no marker
value: a list with nothing after the time sorts before every version at that time (a shorter
prefix first), so the tie rule needs no exception (a version and an end at one millisecond:
the version, the greatest, wins) and no marker can collide with a copied value (a dimension
copies at least one field, each required: ``[t]`` is never a version with values).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from typing import Any, Literal

AsOf = Literal["before", "at-or-before-else-earliest"]
Version = list[Any]  # [event_time, *copied values]

AS_OF_RULES: tuple[AsOf, ...] = ("before", "at-or-before-else-earliest")


# Histories are searched by time with ``bisect_left(history, [t])``: a one-element list sorts
# before every version ``[t, *values]`` at time t and after every version before t (lists
# compare item by item, a shorter prefix first), so the search runs in C with no key function;
# event times are integers, so "after t" is "at or after t + 1".


def end(t: int) -> Version:
    """The end of a key's version at ``t`` (a tombstone's Kafka timestamp): module docstring."""
    return [t]


def is_end(version: Version) -> bool:
    """Is ``version`` an end (no value known from its time on)?"""
    return len(version) == 1


def as_of(history: Sequence[Version], t: int, rule: AsOf) -> Version | None:
    """The version an event at ``t`` joins under ``rule``; None when there is none."""
    if rule == "before":
        i = bisect_left(history, [t])  # first version at or after t (see _at)
        return history[i - 1] if i else None
    i = bisect_left(history, [t + 1])  # first version after t
    if i:
        return history[i - 1]
    return earliest(history)


def earliest(history: Sequence[Version]) -> Version | None:
    """The earliest version; among several at that time the greatest (the tie rule)."""
    if not history:
        return None
    return history[bisect_left(history, [history[0][0] + 1]) - 1]


def insert_version(history: list[Version], version: Version) -> bool:
    """Insert keeping order; False (and nothing changed) when it is already there."""
    i = bisect_left(history, version)
    if i < len(history) and history[i] == version:
        return False
    insort(history, version)
    return True


def purge_history(history: list[Version], horizon: int) -> list[Version]:
    """Drop versions before ``horizon`` but the last one: an event at or after it may need it."""
    return history[purgeable(history, horizon) :]


def purgeable(history: Sequence[Version], horizon: int) -> int:
    """How many versions :func:`purge_history` drops from the front (a bisect: no copy of a hot
    key's history for every version it gets)."""
    return max(bisect_left(history, [horizon]) - 1, 0)


def affected_from(history: Sequence[Version], version: Version, rule: AsOf) -> int | None:
    """Events at or after the returned time may join ``version`` now; None: every event may.

    Called after ``version`` was inserted into ``history``.
    """
    if rule == "before":
        return version[0] + 1
    if version[0] <= history[0][0]:  # the new earliest: events before every version join it
        return None
    return version[0]


def affected_until(history: Sequence[Version], version: Version, rule: AsOf) -> int | None:
    """Events at or after the returned time cannot join ``version`` (None: no such bound).

    Called after ``version`` was inserted into ``history``: an event joins a version of the
    greatest time before it (``before``: strictly; otherwise at or before), so the first later
    version *time* bounds what ``version`` can change. With it, a dimension change re-joins
    the events between two versions, not every later event of the key (a key with 100,000
    events in retention)."""
    i = bisect_left(history, [version[0] + 1])  # the first version at a later time
    if i == len(history):
        return None
    nxt: int = history[i][0]
    return nxt + 1 if rule == "before" else nxt


def affected_floor(
    history: Sequence[Version], version: Version, rule: AsOf, final_before: int | None
) -> int | None:
    """:func:`affected_from`, but never below ``final_before`` (older joins are final)."""
    start = affected_from(history, version, rule)
    if start is None:
        return final_before
    return start if final_before is None else max(start, final_before)

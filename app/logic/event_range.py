"""An event-time range of a join (``--from``/``--to``), and which records answering it needs.

"Reconcile last month" is the joins whose *event* has an event time in ``[from, to)``. Their
answers depend on more than the records in that range:

- an event's answer is a dimension version *before* it: for an event at ``from`` that is the
  key's last version before ``from``, however old. So dimension versions are never cut at
  ``from``: every version before ``to`` is needed (``before``: one at ``to`` or later answers no
  event in the range);
- ``at-or-before-else-earliest``: an event before every version of its key takes the key's
  earliest version, which may come after ``to``: such a dimension is never cut at all;
- a topic that is the events topic of one join and the dimension of another keeps the most any
  of its roles needs.

So the topics must still hold that history when the range is read: the dimension topic's whole
history (``retention.ms=-1``, or earlier archives kept), and the events and output topics every
record appended since ``from`` was current (late records are appended later than their event
time). docs/batch/index.md#an-event-time-range says what that means for topic retention.

Pure: shared by the ``archive`` command and the batch twin (which repeats it as Spark filters).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["EventRange", "Role", "parse_time", "needs"]

Role = Literal["events", "dimension-before", "dimension-earliest", "output"]
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_time(text: str) -> int:
    """Epoch ms from ``1790000000000`` (digits: epoch ms), ``2026-10-01`` (midnight UTC) or an
    ISO date-time (``2026-10-01T12:00:00Z``, ``...+02:00``; no zone: UTC)."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is neither epoch milliseconds nor an ISO date or date-time "
            "(e.g. 2026-10-01 or 2026-10-01T12:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return (when - _EPOCH) // dt.timedelta(milliseconds=1)  # exact: no float on the way


@dataclass(frozen=True)
class EventRange:
    """Event times ``start <= t < end``; None: unbounded on that side."""

    start: int | None = None
    end: int | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise ValueError(
                f"an empty event-time range: from {self.start} is not before to {self.end}"
            )

    @property
    def bounded(self) -> bool:
        return self.start is not None or self.end is not None

    def has(self, t: int) -> bool:
        """Is an event at ``t`` in the range?"""
        return (self.start is None or t >= self.start) and (self.end is None or t < self.end)

    def before_end(self, t: int) -> bool:
        return self.end is None or t < self.end


def needs(r: EventRange, role: Role, t: int | None) -> bool:
    """Is a record at event time ``t`` of a topic in ``role`` needed to answer the joins of
    ``r``? (A record needed by any role of its topic is kept; None: no event time, kept.)"""
    if t is None or role == "dimension-earliest":
        return True
    if role == "dimension-before":
        return r.before_end(t)
    return r.has(t)  # events, and output revisions (the joins of the events in the range)

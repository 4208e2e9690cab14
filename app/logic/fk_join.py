"""The foreign-key join as pure rules: a left table x a right table, joined on a field of the
left row (docs/joins/declarative.md#foreign-key-joins; the built-in car join is one:
docs/joins/car-zone.md).

Two sides, each a small state machine the agents drive (:mod:`app.agents.fk_join`: they only
load/store state and send what these functions return; the property tests drive them directly):

- left side, keyed by the left key: a key's current row is its newest version. A newer version
  pointing at another right key yields the moves ``DEL`` (old right key) and ``ADD`` (new one);
  these go to an internal topic keyed by the right key, so they reach the right side's
  partitions.
- right side, keyed by the right key: the key's newest version, and the left rows pointing at
  it under (right key, left key) index keys. ``ADD`` stores the left row and joins it with the
  right version, ``DEL`` removes it, a newer right version re-joins every left row of the key
  (a range scan).

Order ("newest"): a total order, so that every answer is deterministic whatever the arrival
order (the car join's tie rules, for any spec):
- versions of one left key compare by ``(event_time, foreign key, *copied values)``;
- versions of one right key compare by ``(event_time, *copied values)``;
- outputs of one left key compare by :func:`output_order`: left order first, then right order
  (no right version sorts first). This is the consumer rule: keep the greatest output per key.

Deletes (a tombstone on either side, at its Kafka timestamp): an *end*, a version with no value
(:meth:`Left.end`, :meth:`Right.end`), ordered by its time alone, so at one time a version with
values is greater (the event-time join's tie rule, :mod:`app.logic.histories`):
- a right end is the right key's newest version like any: the left rows pointing at it re-join
  as null (an output with the end: no copied values, its time as the right time, so the
  consumer rule keeps it over the outputs of the version it ended);
- a left end removes the row: a ``DEL`` from the right key it pointed at, and a *delete* of the
  left key on the output (:class:`Deleted`: a tombstone with the end's time), which the consumer
  rule orders like an output: greater than the row's outputs before it, less than a version
  after it. A key with no row yet stores its end (an older version arriving later is older)
  and deletes nothing.

Re-delivery (at-least-once): a record equal to the current one is not ignored: it yields its
moves/outputs again, so outputs lost in a crash between saving state and sending come back when
the input is re-consumed. Duplicates are harmless under the consumer rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Op = Literal["ADD", "DEL"]


@dataclass(frozen=True, slots=True)
class Left:
    """A left record: row ``key`` points at right key ``fk`` from ``event_time`` on, with the
    copied ``values``."""

    key: Any
    fk: Any  # None: an end (the row is deleted from ``event_time`` on)
    values: tuple[Any, ...]
    event_time: int

    @property
    def order(self) -> tuple[Any, ...]:
        if self.fk is None:  # an end: its time alone, below a version at the same time
            return (self.event_time,)
        return (self.event_time, self.fk, *self.values)

    @staticmethod
    def end(key: Any, event_time: int) -> Left:
        """Row ``key`` deleted at ``event_time`` (a tombstone on the left topic)."""
        return Left(key, None, (), event_time)


@dataclass(frozen=True, slots=True)
class Right:
    """A right record: key ``key`` has the copied ``values`` from ``event_time`` on."""

    key: Any
    values: tuple[Any, ...]  # (): an end (no value known from ``event_time`` on)
    event_time: int

    @property
    def order(self) -> tuple[Any, ...]:
        return (self.event_time, *self.values)

    @staticmethod
    def end(key: Any, event_time: int) -> Right:
        """Right key ``key`` has no value from ``event_time`` on (a tombstone)."""
        return Right(key, (), event_time)


@dataclass(frozen=True, slots=True)
class Move:
    """An internal move, keyed by ``fk``: the left row enters/leaves that right key.

    ``left`` is the version that caused the move: for ``ADD`` it points at ``fk``; for ``DEL``
    it points elsewhere, and only an index entry older than it is removed, so a re-delivered
    ``DEL`` never removes a newer ``ADD``.
    """

    op: Op
    fk: Any
    left: Left


@dataclass(frozen=True, slots=True)
class Joined:
    """One output: a left row and its right key's version (None: unknown yet)."""

    left: Left
    right: Right | None


#: the header of a left key's delete on the output (a tombstone has no value to carry it): the
#: end's time, epoch ms as decimal text, which orders the delete for the consumer rule
DELETED_AT = "etj-deleted-at"


@dataclass(frozen=True, slots=True)
class Deleted:
    """A delete of left key ``left.key`` on the output (a tombstone), ``left`` the end."""

    left: Left


def output_order(out: Joined | Deleted) -> tuple[Any, ...]:
    """The consumer rule's order: keep, per left key, the output with the greatest value of
    this. Left order, then right order; an output without a right version sorts below any with
    one; a delete is its end's order (a version after it is greater)."""
    if isinstance(out, Deleted):
        return out.left.order
    right = (-1,) if out.right is None else out.right.order
    return (*out.left.order, *right)


def newest_per_key(outputs: Iterable[Joined | Deleted]) -> dict[Any, Joined]:
    """What a consumer of the output keeps: per left key, the greatest :func:`output_order`
    (equal: the later one); a key whose greatest is a delete is not kept."""
    best: dict[Any, Joined | Deleted] = {}
    for out in outputs:
        cur = best.get(out.left.key)
        if cur is None or output_order(out) >= output_order(cur):
            best[out.left.key] = out
    return {k: out for k, out in best.items() if isinstance(out, Joined)}


# --- left side: left key -> Position -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Position:
    """A left key's newest version, and the right key it last left (to re-send that ``DEL`` on
    replay)."""

    left: Left
    left_fk: Any = None

    def moves(self) -> list[Move]:
        """The moves that put the row where it is now (DEL first, as they were first sent);
        an end's: the DEL from where it was, if anywhere."""
        out = []
        if self.left_fk is not None and self.left_fk != self.left.fk:
            out.append(Move("DEL", self.left_fk, self.left))
        if self.left.fk is not None:
            out.append(Move("ADD", self.left.fk, self.left))
        return out


def apply_left(position: Position | None, left: Left) -> tuple[Position | None, list[Move]]:
    """Apply one left record: (the new position to store, or None to keep the old; moves).

    - first version of the key: ADD;
    - newer, other right key: DEL old right key, ADD new one (a real move);
    - newer, same right key: ADD (updates the copied values and event time, no DEL);
    - equal to the position (re-delivery): the position's moves again, nothing to store;
    - older: nothing at all (an old version arriving late never moves the row back);
    - an end (a delete): DEL from the right key the row points at (none: nothing to move);
      after an end, a newer version is placed as a first one is (ADD).
    Whether the output gets a delete: :func:`left_deleted`.
    """
    if position is None:
        new = Position(left)
        return new, new.moves()
    current = position.left
    if left.order < current.order:
        return None, []
    if left.order == current.order:
        return None, position.moves()
    if current.fk is None:  # the row was deleted: placed anew, where it was last left
        new = Position(left, position.left_fk)
        return new, [m for m in new.moves() if m.op == "ADD"]
    if left.fk != current.fk:
        new = Position(left, current.fk)
        return new, [Move("DEL", current.fk, left), *new.moves()[1:]]
    return Position(left, position.left_fk), [Move("ADD", left.fk, left)]


def left_deleted(before: Position | None, stored: Position | None, left: Left) -> bool:
    """Does left record ``left`` delete its key on the output? It is an end that is (now, or
    again: a re-delivery) the key's newest, and the key had a row before it (``before``, the
    position it was applied to; ``stored``, what :func:`apply_left` stored, None: nothing)."""
    if left.fk is not None or before is None:
        return False
    return stored is not None or before.left == left


# --- right side: right key -> Right; (right key, left key) -> the left version --------------


def apply_add(stored: Left | None, move: Move, right: Right | None) -> tuple[bool, Joined | None]:
    """ADD: (store ``move.left`` under (fk, key)?, the output to send). An ADD older than the
    stored entry (possible only through re-delivery) changes nothing."""
    if stored is not None and move.left.order < stored.order:
        return False, None
    return move.left != stored, Joined(move.left, right)


def apply_del(stored: Left | None, move: Move) -> bool:
    """DEL: remove the (fk, key) entry? Only if it is older than the version that moved it."""
    return stored is not None and stored.order < move.left.order


def apply_right(
    stored: Right | None, right: Right, lefts: Iterable[Left]
) -> tuple[bool, list[Joined]]:
    """A right record: (store it?, one output per left row pointing at its key).

    ``lefts`` is only iterated when the record is not older than the stored one (pass a lazy
    range scan). An equal record (re-delivery) re-emits the outputs without storing.
    """
    if stored is not None and right.order < stored.order:
        return False, []
    return right != stored, [Joined(left, right) for left in lefts]


# --- the reference answer ---------------------------------------------------------------------


def exact_view(lefts: Iterable[Left], rights: Iterable[Right]) -> dict[Any, Joined]:
    """Brute-force reference answer: left key -> its output, whatever the input order: per left
    key its greatest version, joined with the greatest version of the right key it points at
    (none: no right version; an end: the end). A key whose greatest is an end has none. The
    batch twin uses the same orders."""
    newest_left: dict[Any, Left] = {}
    for a in lefts:
        cur = newest_left.get(a.key)
        if cur is None or a.order > cur.order:
            newest_left[a.key] = a
    newest_right: dict[Any, Right] = {}
    for z in rights:
        cur_z = newest_right.get(z.key)
        if cur_z is None or z.order > cur_z.order:
            newest_right[z.key] = z
    return {
        k: Joined(a, newest_right.get(a.fk)) for k, a in newest_left.items() if a.fk is not None
    }

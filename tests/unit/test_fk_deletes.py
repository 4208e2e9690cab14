"""Deletes in a foreign-key join (app/logic/fk_join.py): a right key's end re-joins its left
rows as null, a left key's end moves its row out and deletes the key on the output; scenarios,
then any arrival order and any interleaving of the right side's partitions against a
brute-force answer that knows ends."""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.joins.fk_spec import resolve_fk
from app.logic.fk_join import (
    Deleted,
    Joined,
    Left,
    Move,
    Position,
    Right,
    apply_add,
    apply_del,
    apply_left,
    apply_right,
    exact_view,
    left_deleted,
    newest_per_key,
)
from tests.unit.test_fk_spec import orders


def test_a_left_end_moves_the_row_out_and_deletes_the_key_once_it_had_one():
    v1 = Left("o1", "c1", (5.0,), 10)
    position, _ = apply_left(None, v1)
    # 1. the end at 20: DEL from c1, and a delete on the output
    end = Left.end("o1", 20)
    new, moves = apply_left(position, end)
    assert new == Position(end, "c1") and [(m.op, m.fk, m.left) for m in moves] == [
        ("DEL", "c1", end)
    ]
    assert left_deleted(position, new, end)
    # 2. re-delivered: the DEL and the delete again, nothing stored
    assert apply_left(new, end) == (None, [Move("DEL", "c1", end)])
    assert left_deleted(new, None, end)
    # 3. an older version arriving late changes nothing; a version at the end's time wins
    assert apply_left(new, Left("o1", "c2", (1.0,), 15)) == (None, [])
    back = Left("o1", "c2", (1.0,), 20)
    again, moves = apply_left(new, back)
    assert again == Position(back, "c1") and moves == [Move("ADD", "c2", back)]
    # 4. an end for a key with no row: stored (a later-arriving older version loses to it),
    #    no move, no delete
    lone = Left.end("o9", 5)
    stored, moves = apply_left(None, lone)
    assert stored == Position(lone) and moves == [] and not left_deleted(None, stored, lone)
    assert apply_left(stored, Left("o9", "c1", (1.0,), 4)) == (None, [])


def test_a_right_end_rejoins_its_rows_as_null_and_the_consumer_keeps_that():
    a = Left("o1", "c1", (5.0,), 10)
    r = Right("c1", ("eu",), 3)
    end = Right.end("c1", 7)
    store, [out] = apply_right(r, end, [a])
    assert store and out == Joined(a, end)
    assert apply_right(end, Right("c1", ("us",), 6), [a]) == (False, [])  # older than the end
    assert apply_right(end, Right("c1", ("us",), 7), [a])[0]  # at its time, a version wins
    assert newest_per_key([out, Joined(a, r)]) == {"o1": out}
    spec = resolve_fk(orders(), 0)
    wire = spec.to_wire(out)
    assert (wire["region"], wire["region_time"]) == (None, 7)
    assert spec.from_wire(wire) == out


def test_a_delete_on_the_output_is_ordered_like_the_end_it_is():
    v1, end, v2 = Left("o1", "c1", (5.0,), 10), Left.end("o1", 20), Left("o1", "c2", (1.0,), 30)
    stale, gone, back = Joined(v1, None), Deleted(end), Joined(v2, None)
    for outs in ([stale, gone], [gone, stale]):  # a stale output after the delete: ignored
        assert newest_per_key(outs) == {}
    for outs in ([stale, gone, back], [back, gone, stale]):
        assert newest_per_key(outs) == {"o1": back}


def test_an_end_s_del_round_trips_through_the_moves_topic():
    spec = resolve_fk(orders(), 0)
    move = Move("DEL", "c1", Left.end("o1", 20))
    wire = spec.move_to_wire(move)
    assert wire["amount"] is None and spec.move_of(wire) == move


# --- property: any order, any interleaving of the right side's partitions ---------------------

lefts = st.one_of(
    st.builds(
        Left,
        st.sampled_from(["o1", "o2", "o3"]),
        st.sampled_from(["c1", "c2"]),
        st.tuples(st.sampled_from([1.0, 2.0])),
        st.integers(0, 8),
    ),
    st.builds(Left.end, st.sampled_from(["o1", "o2", "o3"]), st.integers(0, 8)),
)
rights = st.one_of(
    st.builds(
        Right,
        st.sampled_from(["c1", "c2"]),
        st.tuples(st.sampled_from(["eu", "us"])),
        st.integers(0, 8),
    ),
    st.builds(Right.end, st.sampled_from(["c1", "c2"]), st.integers(0, 8)),
)


def brute(ls: list[Left], rs: list[Right]) -> dict[str, tuple[Any, ...]]:
    """Left key -> (fk, left values, right values or None, left time, right time): each key's
    greatest version by (time, then fk and values: an end, with none, below them), none if it
    is an end; its right key's greatest likewise (an end: no values, its time)."""

    def rank(x: Any) -> tuple[Any, ...]:
        return (x.event_time,) if not x.values else (x.event_time, getattr(x, "fk", ""), *x.values)

    out = {}
    for key in {a.key for a in ls}:
        a = max((x for x in ls if x.key == key), key=rank)
        if a.fk is None:
            continue
        mine = [z for z in rs if z.key == a.fk]
        z = max(mine, key=rank) if mine else None
        out[key] = (
            a.fk,
            a.values,
            None if z is None or not z.values else z.values,
            a.event_time,
            None if z is None else z.event_time,
        )
    return out


def flat(view: dict[Any, Joined]) -> dict[str, tuple[Any, ...]]:
    return {
        k: (
            j.left.fk,
            j.left.values,
            None if j.right is None or not j.right.values else j.right.values,
            j.left.event_time,
            None if j.right is None else j.right.event_time,
        )
        for k, j in view.items()
    }


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(lefts, rights), max_size=25), st.data())
def test_any_order_and_interleaving_with_deletes_ends_on_the_exact_view(records, data):
    dups = data.draw(st.lists(st.sampled_from(records), max_size=5)) if records else []
    order = data.draw(st.permutations(records + dups))
    positions: dict[str, Position] = {}
    stored_rights: dict[str, Right] = {}
    index: dict[tuple[str, str], Left] = {}
    queues: dict[str, deque[Any]] = {"c1": deque(), "c2": deque()}  # a right partition each
    outputs: list[Joined | Deleted] = []
    pending = deque(order)

    def right_side(fk: str) -> None:
        item = queues[fk].popleft()
        if isinstance(item, Right):
            lefts_here = [a for (f, _), a in sorted(index.items()) if f == fk]
            store, outs = apply_right(stored_rights.get(fk), item, lefts_here)
            if store:
                stored_rights[fk] = item
            outputs.extend(outs)
            return
        stored = index.get((fk, item.left.key))
        if item.op == "DEL":
            if apply_del(stored, item) or stored is None:
                index.pop((fk, item.left.key), None)
            return
        store, out = apply_add(stored, item, stored_rights.get(fk))
        if store:
            index[(fk, item.left.key)] = item.left
        if out is not None:
            outputs.append(out)

    while pending or any(queues.values()):
        choices = (["input"] if pending else []) + [fk for fk, q in queues.items() if q]
        step = data.draw(st.sampled_from(choices))
        if step != "input":
            right_side(step)
            continue
        rec = pending.popleft()
        if isinstance(rec, Right):
            queues[rec.key].append(rec)
            continue
        before = positions.get(rec.key)
        new, moves = apply_left(before, rec)
        if new is not None:
            positions[rec.key] = new
        for m in moves:
            queues[m.fk].append(m)
        if left_deleted(before, new, rec):
            outputs.append(Deleted(rec))

    ls = [r for r in records if isinstance(r, Left)]
    rs = [r for r in records if isinstance(r, Right)]
    assert flat(newest_per_key(outputs)) == brute(ls, rs) == flat(exact_view(ls, rs))

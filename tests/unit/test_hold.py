"""A bounded hold (``hold_ms`` on a left spec): the rules alone, then the state layout driven as
the agent drives it (:meth:`app.agents.event_join.JoinEngine.on_record`: advance the stream
time, end the holds it passed, then join the record).

The property: a first answer is never made while a version that applies to the event could
still come within its hold, unless one applies already; a hold ends exactly when the stream
time reaches ``event_time + hold_ms``; in the end every join answers what ``left`` answers
(the batch twin's exact answer is unchanged); the held/released index a worker recovers from
the changelog is the one it kept.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.joins.catalog import mood_spec
from app.joins.joins_table import hold_rows
from app.joins.keys import HELD, RELEASED, held_range, join_range, split_join_key
from app.joins.resolve import resolve
from app.joins.spec import SpecError
from app.joins.state import JoinState
from app.logic.event_join import Event, JoinRules, KeyState, add_event, add_version, release_held
from app.logic.histories import as_of
from app.settings import Settings
from app.state.overlay import MemoryIO, Overlay

P = 0
RETENTION = 10_000
HOLD = 50


def spec(**over: Any) -> Any:
    return resolve(
        {
            **mood_spec(Settings()),
            "retention_ms": RETENTION,
            "review_lag_ms": None,
            "hold_ms": HOLD,
            **over,
        }
    )


# --- the spec ----------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    "over, says",
    [
        ({"mode": "inner"}, "hold_ms is for mode 'left'"),
        ({"hold_ms": RETENTION}, "must be less than retention_ms"),
        ({"window_ms": HOLD - 1}, "exceeds window_ms"),
        ({"hold_ms": 0}, "hold_ms: Input should be greater than 0"),
        ({"finality": True}, "hold_ms with finality .* is not supported yet"),
        ({"emit": "final"}, "hold_ms with finality .* is not supported yet"),
    ],
)
def test_a_hold_that_cannot_work_is_refused_with_its_reason(over, says):
    with pytest.raises(SpecError, match=says):
        spec(**over)


@pytest.mark.unit
def test_a_hold_is_described_and_reaches_the_rules():
    s = spec()
    assert s.describe()["hold_ms"] == HOLD and s.rules.hold_ms == HOLD
    assert resolve({**mood_spec(Settings())}).describe()["hold_ms"] is None


# --- the rules (app.logic.event_join) ----------------------------------------------------------


@pytest.mark.unit
def test_rules_hold_answer_within_the_hold_then_answer_null_then_correct():
    rules, ks = JoinRules("before", "left", HOLD), KeyState()
    # 1. e1 at 100, no mood yet, stream time 100: held, nothing emitted
    assert add_event(rules, ks, Event("c", "e1", 100, ("x",)), clock=100) == (True, [])
    # 2. a mood stamped 90 comes within the hold: e1's first answer has it
    _, [r] = add_version(rules, ks, "c", [90, "happy"])
    assert (r.revision, r.answer, r.cause) == (1, ("happy",), "late-dimension")
    # 3. e2 at 80 (no mood before it), stream time 100: held until the stream time is 130
    assert add_event(rules, ks, Event("c", "e2", 80, ("y",)), clock=100) == (True, [])
    assert release_held(rules, ks, "c", 80 + HOLD - 1) == []
    [end] = release_held(rules, ks, "c", 80 + HOLD)
    assert (end.id, end.revision, end.answer, end.cause) == ("e2", 1, None, "hold-end")
    # 4. a later mood before e2 corrects it as left does
    _, [fix] = add_version(rules, ks, "c", [70, "sad"])
    assert (fix.id, fix.revision, fix.answer, fix.previous) == ("e2", 2, ("sad",), None)
    # 5. an event whose hold has already passed when it arrives answers at once
    _, [late] = add_event(rules, ks, Event("c", "e3", 10, ("z",)), clock=10 + HOLD)
    assert (late.revision, late.answer, late.cause) == (1, None, "arrival")


@pytest.mark.unit
def test_without_a_hold_left_answers_at_once():
    _, [r] = add_event(JoinRules("before", "left"), KeyState(), Event("c", "e", 5), clock=5)
    assert (r.revision, r.answer) == (1, None)


# --- the state layout, driven as the agent drives it --------------------------------------------


class Worker:
    """:meth:`JoinEngine.on_record` without Faust: one partition, mood spec with a hold."""

    def __init__(self) -> None:
        self.spec = spec()
        # a live worker: what it handled is on its way to the log (nothing goes again)
        self.state = JoinState(
            self.spec,
            Overlay(MemoryIO(bytes_keys=False)),
            Overlay(MemoryIO()),
            Overlay(MemoryIO(bytes_keys=False)),
            emitted=lambda p, src: True,
        )
        self.out: list[tuple[Any, int]] = []  # (revision, stream time when it was made)
        self.offset = 0

    def record(self, kind: str, key: str, t: int, value: str) -> None:
        st_ = self.state
        clock = st_.stream_time(P)
        if clock is not None and t < clock - RETENTION:
            return  # late: etj-late
        clock = st_.advance(P, t)
        horizon = clock - RETENTION
        self.offset += 1
        src = [0 if kind == "e" else 1, self.offset]
        revs = st_.release_holds(P, clock, src)
        if kind == "e":
            revs += st_.on_event(
                P, Event(key, f"{key}-{value}", t, (value,)), horizon, horizon, src
            )[0]
        else:
            revs += st_.on_version(P, key, [t, value], horizon, horizon, src)
        self.out += [(r, clock) for r in revs]
        st_.end_batch()

    def tick(self) -> None:
        clock = self.state.stream_time(P)
        revs = self.state.released_unsent(P, clock) + self.state.release_holds(P, clock)
        self.out += [(r, clock) for r in revs]
        self.state.end_batch()

    def index(self, kind: bytes) -> set[bytes]:
        return {k for k, _ in self.state.joins.scan(P, *held_range(P, None, None, kind))}

    def derived(self, kind: bytes) -> set[bytes]:
        """The index a worker recovering from the changelog derives from the ``J`` rows."""
        rows = set()
        for key in ("k", "q"):
            for jk, raw in self.state.joins.scan(P, *join_range(key, None, None)):
                _, t, jid = split_join_key(jk)
                rows |= {
                    k
                    for k, enc, _ in hold_rows(P, key, t, jid, raw, self.state.np, self.state.nd)
                    if enc is not None and k[:1] == kind
                }
        return rows


@pytest.mark.unit
def test_scenario_a_version_within_the_hold_joins_the_first_answer():
    w = Worker()
    w.record("e", "k", 1000, "a")  # 1. held: no mood of k yet
    w.record("e", "q", 1020, "b")  # 2. another key moves the stream time to 1020
    assert w.out == [] and len(w.index(HELD)) == 2
    w.record("v", "k", 990, "happy")  # 3. k's mood, late but within a's hold: a answers with it
    w.record("e", "q", 1049, "c")  # 4. stream time 1049: b is still held (1020 + 50 > 1049)
    [(a, _)] = w.out
    assert (a.id, a.revision, a.answer, a.cause) == ("k-a", 1, ("happy",), "late-dimension")
    w.record("e", "k", 1070, "d")  # 5. stream time 1070 = 1020 + 50: b's hold ends first
    (b, at), (d, _) = w.out[1:]
    assert (b.id, b.answer, b.cause, at) == ("q-b", None, "hold-end", 1070)
    assert (d.id, d.answer, d.cause) == ("k-d", ("happy",), "arrival")
    assert len(w.index(HELD)) == 1  # q-c
    # 6. a mood of q before b corrects it (revision 2); q-c was still held: its first answer
    w.record("v", "q", 1000, "sad")
    assert [(r.id, r.revision, r.answer) for r, _ in w.out[3:]] == [
        ("q-b", 2, ("sad",)),
        ("q-c", 1, ("sad",)),
    ]
    assert w.index(HELD) == set()


@pytest.mark.unit
def test_a_release_is_re_emitted_by_a_tick_until_it_is_known_delivered():
    w = Worker()
    w.record("e", "k", 0, "a")
    w.record("e", "q", HOLD, "b")  # ends a's hold
    assert [r.cause for r, _ in w.out] == ["hold-end"]
    assert len(w.index(RELEASED)) == 1
    w.state.emitted = lambda p, src: False  # a restarted worker: nothing is on its way
    w.tick()
    again = w.out[-1][0]
    assert (again.id, again.revision, again.cause, again.again) == ("k-a", 1, "hold-end", True)
    w.state.delivered = lambda p, src: True  # the record that ended the hold is committed
    w.tick()
    assert w.index(RELEASED) == set() and len(w.out) == 2


steps = st.lists(
    st.tuples(
        st.sampled_from(["v", "e", "e", "tick"]),
        st.integers(0, 400),
        st.sampled_from(["k", "q"]),
        st.sampled_from(["a", "b", "c"]),
    ),
    min_size=1,
    max_size=50,
)


@pytest.mark.unit
@hsettings(max_examples=200, deadline=None)
@given(steps=steps)
def test_no_first_answer_is_made_while_its_hold_could_still_join_a_version(steps):
    w = Worker()
    arrived: dict[str, list[list[Any]]] = {"k": [], "q": []}  # versions seen, per key
    ids: dict[str, tuple[str, int]] = {}
    for kind, t, key, value in steps:
        n = len(w.out)
        if kind == "tick":
            if w.state.stream_time(P) is not None:
                w.tick()
        else:
            w.record(kind, key, t, value)
            if kind == "v":
                arrived[key] = sorted(arrived[key] + [[t, value]])
            else:
                ids[f"{key}-{value}"] = (key, t)
        for r, clock in w.out[n:]:
            if r.revision == 1 and not r.again:
                hold_end = r.event_time + HOLD
                if r.cause == "hold-end":  # exactly at its bound, and with nothing to join
                    assert clock >= hold_end and r.answer is None
                elif r.answer is None:  # answered null: only once its hold has passed
                    assert clock >= hold_end, (r, clock)
        assert w.derived(HELD) == w.index(HELD)
        assert w.derived(RELEASED) == w.index(RELEASED)
    # in the end (the stream time far past every hold) every join answers what left answers
    w.record("e", "z", 10 * RETENTION, "end")
    last: dict[str, Any] = {}
    for r, _ in w.out:  # numbered 1, 2, ... (a re-emit repeats one of them)
        top = last[r.id].revision if r.id in last else 0
        assert r.revision <= top if r.again else r.revision == top + 1
        if not r.again:
            last[r.id] = r
    for jid, (key, t) in ids.items():
        v = as_of(sorted(arrived[key]), t, "before")
        assert last[jid].answer == (None if v is None else tuple(v[1:])), jid


# --- recovery: the held/released index rebuilt from the changelog's J rows -----------------------


@pytest.fixture(params=["memory", "rocksdb"])
def joins_table(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """A hold spec's joins table on each store, as app.topology declares it."""
    import faust

    from app.compat.table_codec import TableSchema
    from app.joins.joins_table import JoinsTable
    from app.state.range_scan import range_table

    app = faust.App(
        f"hold-{request.param}",
        broker="kafka://127.0.0.1:1",
        store=f"{request.param}://",
        datadir=str(tmp_path),
    )
    table = range_table(
        app,
        "hold-joins",
        default=None,
        table_class=JoinsTable,
        partitions=4,
        key_type=bytes,
        schema=TableSchema(
            key_serializer="raw", value_serializer="json", decode=request.param == "memory"
        ),
    )
    w = Worker()
    table.hold_shape = (w.state.np, w.state.nd)
    return table


@pytest.mark.unit
async def test_a_recovered_worker_knows_its_held_and_released_joins(joins_table):
    """The changelog carries J rows only; the worker that recovers from it has the H rows of
    the joins still held and the R rows of the answers hold ends made, as the worker that wrote
    them had (a held join that a version answered, or that was purged, has neither)."""
    from app.joins.keys import join_key
    from app.state.range_scan import scan
    from tests.unit.test_range_scan import recover

    w = Worker()
    w.record("e", "k", 1000, "a")  # held, then ended by the stream time (1050)
    w.record("e", "q", 1020, "b")  # held, then ended by the stream time (1070)
    w.record("e", "k", 1030, "c")  # held, then answered by a version
    w.record("v", "k", 1010, "happy")
    w.record("e", "z", 1075, "d")  # ends a's and b's holds; d itself held
    rows = [(k, v) for k, v in w.state.joins.scan(P, b"J", b"K")]
    gone = join_key("k", 999, "k-x")  # a join deleted since: its tombstone
    await recover(
        joins_table, [(gone, [999, "x", None, None, 0, "arrival", None]), *rows, (gone, None)]
    )
    for kind in (HELD, RELEASED):
        lo, hi = held_range(1, None, None, kind)  # recover() writes partition 1
        got = {k[5:] for k, _ in scan(joins_table, lo, hi, 1)}
        assert got == {k[5:] for k in w.index(kind)}, kind
    assert len(w.index(HELD)) == 1 and len(w.index(RELEASED)) == 2  # d; a and b

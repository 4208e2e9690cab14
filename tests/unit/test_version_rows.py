"""A dimension's versions one row each (``V`` rows, :mod:`app.joins.keys`), read by one-row range
reads (:meth:`app.state.overlay.Overlay.edge`): the engine over them answers as the rules over
the key's whole history would, keeps exactly the live versions, and converts a row of the layout
before (one row per key).

Why a reference here: the engine no longer holds a key's history as a list; the invariant it
must keep is that every join still open (at or after the horizon) answers what
:func:`app.logic.histories.as_of` gives over the history the old layout kept (insert, purge
all but the last before the horizon) — for both as-of rules, with ties and re-deliveries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faust
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.joins.catalog import mood_spec, movie_spec
from app.joins.joins_table import JoinsTable, joins_overlay
from app.joins.keys import JOIN, VERSION, join_range, split_join_key, version_key, version_range
from app.joins.resolve import resolve
from app.joins.state import JoinState
from app.logic.event_join import Event
from app.logic.histories import insert_version, purgeable
from app.settings import Settings
from app.state.overlay import MemoryIO, Overlay
from app.state.range_scan import range_table
from app.state.store_io import StoreIO
from tests.unit.test_range_scan import event_of

P = 0
RETENTION = 100


def engine(spec_of: Any) -> JoinState:
    spec = resolve({**spec_of(Settings()), "retention_ms": RETENTION, "window_ms": None})
    return JoinState(
        spec,
        Overlay(MemoryIO(bytes_keys=False)),
        joins_overlay(MemoryIO()),
        Overlay(MemoryIO(bytes_keys=False)),
    )


def versions(state: JoinState, key: str) -> list[list[Any]]:
    return sorted(v for _, v in state.joins.scan(P, *version_range(key, None, None)))


def joins(state: JoinState, key: str) -> dict[str, Any]:
    return {
        split_join_key(k)[2]: state.load(raw)
        for k, raw in state.joins.scan(P, *join_range(key, None, None))
    }


steps = st.lists(
    st.tuples(
        st.sampled_from(["v", "e", "tick"]),
        st.integers(0, 60),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["k", "q"]),
    ),
    min_size=1,
    max_size=60,
)


@pytest.mark.unit
@hsettings(max_examples=150, deadline=None)
@given(steps=steps, rule=st.sampled_from([mood_spec, movie_spec]))
def test_every_open_join_answers_as_the_whole_history_does(steps, rule):
    state = engine(rule)
    rules = state.rules
    history: dict[str, list[list[Any]]] = {}  # the reference: the old layout's list per key
    clock = None
    for n, (kind, t, value, key) in enumerate(steps):
        t = t * 5  # coarse: events at a version's time, ties between versions
        if kind == "tick":
            if clock is not None:
                state.on_tick(P, clock, clock - RETENTION)
                for h in history.values():  # the engine purges the keys whose joins aged
                    del h[: purgeable(h, clock - RETENTION)]
            continue
        clock = max(clock or t, t)
        horizon = clock - RETENTION
        if t < horizon:
            continue  # a late record: the agent routes it away before the state
        if kind == "v":
            v = [t, value]
            h = history.setdefault(key, [])
            insert_version(h, v)
            del h[: purgeable(h, horizon)]
            state.on_version(P, key, list(v), horizon, horizon)
        else:
            payload = ("rec",) if rule is mood_spec else ("u", 1.0)
            state.on_event(P, Event(key, f"id{n}", t, payload), horizon, horizon)
        state.end_batch()
        for k, h in history.items():
            got = versions(state, k)  # the reference, and perhaps older ones a tick left
            extra = len(got) - len(h)  # (the engine purges the keys whose joins aged)
            assert extra >= 0 and got[extra:] == h and all(v[0] < horizon for v in got[:extra])
            for jid, j in joins(state, k).items():
                if j.event_time >= horizon:
                    answer, at = rules.answer(h, j.event_time)
                    assert (j.answer, j.answer_time) == (answer, at), (k, jid, j, h)


@pytest.mark.unit
def test_purge_keeps_the_last_version_before_the_horizon_and_tombstones_the_rest():
    state = engine(mood_spec)
    for t, m in [(10, "a"), (20, "b"), (20, "c"), (300, "d")]:
        state.on_version(P, "k", [t, m], None, None)
    state.joins.flush()
    state.on_version(P, "k", [310, "e"], 250, 250)
    rows = state.joins.flush()
    gone = {k for _, _, k, v in rows if v is None}
    assert gone == {version_key("k", 10, ["a"]), version_key("k", 20, ["b"])}
    assert versions(state, "k") == [[20, "c"], [300, "d"], [310, "e"]]  # ties: "c" > "b"


@pytest.mark.unit
def test_a_batch_writes_only_the_versions_it_changes():
    state = engine(mood_spec)
    for t in range(1000):
        state.on_version(P, "hot", [t, "x" * 200], None, None)
    state.joins.flush()
    state.on_version(P, "hot", [500, "late"], None, None)
    rows = state.joins.flush()
    assert [k for _, _, k, _ in rows if k[:1] == VERSION] == [version_key("hot", 500, ["late"])]
    assert max(len(v or b"") for *_, v in rows) < 400  # no row holds the key's history


@pytest.mark.unit
def test_a_batch_logs_its_versions_before_its_joins():
    # an event answered on arrival, then a late version before it re-answers it, in one batch:
    # the join's row was written first; its changelog row must still come after the version it
    # names, so that no prefix of the batch's rows (a kill -9 mid-send) has the join without it
    state = engine(mood_spec)
    state.on_version(P, "c", [10, "sad"], None, None)
    state.joins.flush()
    state.on_event(P, Event("c", "r1", 50, ("tea",)), None, None)
    state.on_version(P, "c", [30, "excited"], None, None)
    state.on_event(P, Event("c", "r2", 60, ("tea",)), None, None)
    state.on_version(P, "c", [55, "ok"], None, None)
    kinds = [k[:1] for _, _, k, _ in state.joins.flush()]
    assert sorted(set(kinds)) == sorted({VERSION, JOIN})
    assert kinds == sorted(kinds, key=lambda kind: kind != VERSION), kinds


@pytest.mark.unit
def test_an_old_layout_row_is_converted_and_its_tombstone_waits_for_delivery():
    delivered: set[Any] = set()
    spec = resolve({**mood_spec(Settings()), "retention_ms": RETENTION, "window_ms": None})
    old = Overlay(MemoryIO(bytes_keys=False))
    old.put(P, "k", [[10, "a"], [20, "b"], [30, "c"]])
    old.flush()
    state = JoinState(
        spec,
        old,
        Overlay(MemoryIO()),
        Overlay(MemoryIO(bytes_keys=False)),
        delivered=lambda p, src: tuple(src) in delivered,
    )
    revs, _ = state.on_event(P, Event("k", "e1", 25, ("r",)), None, None, src=[0, 7])
    assert revs[0].answer == ("b",)  # answered from the converted rows
    assert versions(state, "k") == [[10, "a"], [20, "b"], [30, "c"]]
    state.end_batch()
    assert old.flush() == []  # not delivered yet: the old row stays
    state.joins.flush()
    state.on_event(P, Event("k", "e2", 26, ("r",)), None, None, src=[0, 8])
    state.end_batch()
    again = {k for _, _, k, v in state.joins.flush() if k[:1] == VERSION}
    assert again == {version_key("k", t, [m]) for t, m in [(10, "a"), (20, "b"), (30, "c")]}
    assert old.flush() == []  # its rows again, until the converting record is delivered
    # the key is read by every batch (a hot key): the record waited for stays the first that
    # converted it, so its delivery ends the wait (waiting for the latest never ended)
    delivered.add((0, 7))
    state.on_event(P, Event("k", "e3", 27, ("r",)), None, None, src=[0, 9])
    state.end_batch()
    assert old.flush() == [("memory", P, b'"k"', None)]  # its tombstone
    assert versions(state, "k") == [[10, "a"], [20, "b"], [30, "c"]]


def ordered_table(store: str, datadir: Path, joins_layout: bool) -> faust.Table:
    app = faust.App(
        f"edge-{store}-{joins_layout}",
        broker="kafka://127.0.0.1:1",
        store=f"{store}://",
        datadir=str(datadir),
    )
    extra = {"table_class": JoinsTable} if joins_layout else {}
    return range_table(app, "rows", default=None, partitions=2, **extra)


@pytest.mark.unit
@pytest.mark.parametrize(
    "store,joins_layout",
    [("memory", False), ("memory", True), ("rocksdb", False), ("rocksdb", True)],
)
def test_one_row_reads_equal_the_ends_of_the_range_on_every_store(tmp_path, store, joins_layout):
    table = ordered_table(store, tmp_path, joins_layout)
    io, mem = StoreIO(table), MemoryIO()
    keys = [
        version_key(k, t, [v])
        for k in ("a", "ab", "b")
        for t in (0, 3, 3, 7, 2**40)
        for v in ("x", "y")
    ]
    with event_of(1):
        for k in keys:
            io.write_one(1, k, [1])
            mem.write_one(1, k, [1])
        for k in ("a", "ab", "b", "zz"):
            for lo_t, hi_t in [(None, None), (None, 3), (3, 4), (4, 7), (8, None), (0, 1)]:
                lo, hi = version_range(k, lo_t, hi_t)
                whole = [key for key, _ in io.scan(1, lo, hi)]
                for last in (False, True):
                    want = (whole[-1] if last else whole[0]) if whole else None
                    got = io.edge(1, lo, hi, last)
                    assert (got and got[0]) == want, (k, lo_t, hi_t, last)
                    got_mem = mem.edge(1, lo, hi, last)
                    assert (got_mem and got_mem[0]) == want

"""Finality promises (app.logic.finality): a promise is made only for what is delivered, one at a
time per partition, re-sent after a crash, and never broken.

The property drives the rules through a model of the per-batch protocol: each batch is handled
(its promise row and stream time are durable at once: the changelog comes first), then delivered
in order; a crash loses what is in flight and this process's memory, never the durable row. The
engine's rule for revisions (never one of a join behind the horizon; re-emits of older joins
dropped when a promise covers them, :meth:`app.agents.event_join.JoinEngine._outs`) makes the
revisions; the log must never carry a revision of a join after a promise covering it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.joins.catalog import mood_spec
from app.joins.resolve import resolve
from app.joins.spec import SpecError
from app.logic.finality import Promise, next_step, ready_before, ready_now
from app.settings import Settings

RETENTION = 100


@pytest.mark.unit
def test_a_promise_waits_for_its_batch_then_for_its_own_delivery():
    promise, pending = Promise(), [(150, "b1"), (260, "b2")]
    delivered = {"b1"}
    # 1. b1 is delivered: its stream time 150 makes 50 promisable; b2 is not yet
    ready = ready_before(pending, delivered.__contains__, RETENTION)
    assert ready == 50 and pending == [(260, "b2")]
    assert next_step(promise, ready, False, False) == ("new", None, 50)
    promise.source = "b3"  # the record whose outputs carry it
    # 2. b2 delivered too, but the promise in flight is not: nothing new
    assert next_step(promise, 160, False, True) == ("none", None, None)
    # 3. a restarted worker (nothing on its way): the same promise again
    assert next_step(promise, None, False, False) == ("again", None, 50)
    # 4. delivered: settled, then the next one covers [50, 160)
    assert next_step(promise, None, True, True) == ("settled", None, None)
    assert promise.delivered_before == 50
    assert next_step(promise, 160, False, False) == ("new", 50, 160)
    assert Promise.from_json(promise.to_json()) == promise


@pytest.mark.unit
def test_the_spec_says_emit_final_and_finality():
    s = resolve({**mood_spec(Settings()), "emit": "final"})
    assert s.final_topic == f"{s.output}-final" and s.describe()["emit"] == "final"
    assert resolve({**mood_spec(Settings()), "finality": True}).describe()["finality"]
    assert resolve(mood_spec(Settings())).final_topic is None
    with pytest.raises(SpecError, match="emit: Input should be 'all' or 'final'"):
        resolve({**mood_spec(Settings()), "emit": "once"})


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("batch"), st.integers(0, 60), st.lists(st.integers(0, 400), max_size=4)
        ),  # revisions' join times (any age)
        st.tuples(st.just("deliver")),
        st.tuples(st.just("crash")),
    ),
    max_size=60,
)


@pytest.mark.unit
@hsettings(max_examples=300, deadline=None)
@given(ops=ops)
def test_no_revision_of_a_join_comes_after_a_promise_that_covers_it(ops):
    durable: dict[str, Any] = {"promise": None, "clock": 0}  # the changelog's rows
    pending: list[tuple[int, Any]] = []  # this process's memory
    in_flight: list[tuple[str, list[tuple[str, int]]]] = []  # (source, outputs), in order
    handled: set[str] = set()
    delivered: set[str] = set()
    log: list[tuple[str, int]] = []  # ("rev", join time) / ("promise", final_before)
    kept: list[int | None] = [None]  # this process's memory: ready, not used yet (ready_now)
    moved_since_crash = [False]
    n = 0
    # the ops, then a quiet stream: everything delivered, batches that move no stream time
    for op in [
        *ops,
        *[("deliver",)] * 70,
        ("batch", 0, []),
        *[("deliver",)] * 2,
        ("batch", 0, []),
        *[("deliver",)] * 2,
        ("batch", 0, []),
        ("deliver",),
    ]:
        if op[0] == "deliver" and in_flight:
            src, outs = in_flight.pop(0)
            log += outs
            delivered.add(src)
        elif op[0] == "crash":
            in_flight.clear()
            pending.clear()
            handled.clear()
            kept[0] = None
            moved_since_crash[0] = False
        elif op[0] == "batch":
            _, step, times = op
            n += 1
            src = f"b{n}"
            handled.add(src)
            promise = Promise.from_json(durable["promise"])
            ready = ready_now(pending, delivered.__contains__, RETENTION, kept[0])
            what, _, hi = next_step(
                promise,
                ready,
                promise.source in delivered,
                promise.source in handled or promise.source in delivered,
            )
            kept[0] = None if what == "new" else ready
            moved_since_crash[0] = moved_since_crash[0] or step > 0
            outs: list[tuple[str, int]] = []
            if what in ("new", "again"):
                promise.source = src
                outs.append(("promise", hi))
            clock = durable["clock"] + step
            horizon = clock - RETENTION
            for t in times:
                # a new revision is of a join at or after the horizon; an older one is a
                # re-emit, dropped when the promise covers it
                if t >= horizon or promise.final_before is None or t >= promise.final_before:
                    outs.append(("rev", t))
            durable["promise"], durable["clock"] = promise.to_json(), clock
            if step > 0:  # as the engine: a batch is pending only if it moved the stream time
                pending.append((clock, src))
            in_flight.append((src, outs))
    promised = None
    for kind, t in log:
        if kind == "promise":
            promised = t if promised is None else max(promised, t)
        else:
            assert promised is None or t >= promised, (t, promised, log)
    # and the promises keep up: once the stream is quiet and its batches delivered, what the
    # last stream time allows is promised (unless a crash came after it moved: a restarted
    # worker promises again once the stream time moves)
    if moved_since_crash[0] and durable["clock"] - RETENTION > 0:
        assert promised == durable["clock"] - RETENTION, (promised, durable["clock"], log)

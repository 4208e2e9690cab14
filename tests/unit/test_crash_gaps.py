"""A kill -9 between a batch's changelog rows and its outputs, then a fresh process: every
revision number of every join reaches the output log (1..n, no gap).

The broker test (tests/broker/test_faults_kill.py) meets one interleaving per run; here the
engine's own layout (:class:`app.joins.state.JoinState`) and its knowledge of what is
delivered (:class:`app.loop.acks.AckedRuns`, committed offsets) run through many, with no
Faust and no broker:

1. the first process handles a prefix of the inputs (per input in offset order, interleaved
   in any order: flow control or not), a batch at a time; each batch's changelog rows and
   outputs are kept; batches are acked once their outputs are durable, a few batches behind
   (the delivery pipeline);
2. the kill: the changelog rows of the first ``c`` batches reached the broker, the outputs of
   the first ``o <= c``; the committed offsets cover some of the acked batches;
3. a fresh process recovers the tables from those changelog rows and handles every record
   from the committed offsets on (again in any interleaving), each batch delivered; perhaps
   with a rebalance on the way (it forgets what it acked and handled, and reads again from
   its own committed offsets).

The log is the first process's durable outputs and all of the second's. Event ids may repeat
(an event re-using its id with another recommendation or time revises its join).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.joins.catalog import mood_spec, movie_spec
from app.joins.keys import JOIN, expiry_key, id_key, split_join_key
from app.joins.resolve import resolve
from app.joins.state import JoinState
from app.logic.histories import end as ended_at
from app.loop.acks import AckedRuns
from app.settings import Settings
from app.state.overlay import MemoryIO, Overlay

P = 0
EVENTS, MOODS, TICKS = "events", "moods", "ticks"
INDEX = {EVENTS: 0, MOODS: 1, TICKS: 2}


def spec_of(retention: int, review: int | None, of: Any = mood_spec) -> Any:
    return resolve(
        {**of(Settings()), "retention_ms": retention, "review_lag_ms": review, "window_ms": None}
    )


class Process:
    """One worker process's join: its tables, acked and handled runs, committed offsets."""

    def __init__(self, spec: Any, committed: dict[str, int] | None = None) -> None:
        self.spec = spec
        self.ios = (MemoryIO(bytes_keys=False), MemoryIO(), MemoryIO(bytes_keys=False))
        self.overlays = tuple(Overlay(io) for io in self.ios)
        self.acked, self.handled = AckedRuns(), AckedRuns()
        self.committed = dict(committed or {})
        self.state = JoinState(spec, *self.overlays, self.delivered, self.emitted)
        self.parse = {EVENTS: spec.events.parser(), MOODS: spec.dimension.parser()}

    def delivered(self, p: int, src: Any) -> bool:  # JoinEngine.delivered
        if src is None:
            return True
        topic, offset = (EVENTS, MOODS, TICKS)[src[0]], src[1]
        committed = self.committed.get(topic)
        return self.acked.holds(topic, p, offset) or (committed is not None and offset < committed)

    def emitted(self, p: int, src: Any) -> bool:  # JoinEngine.emitted
        if src is None:
            return True
        topic = (EVENTS, MOODS, TICKS)[src[0]]
        return self.handled.holds(topic, p, src[1]) or self.delivered(p, src)

    def recover(self, changelog: list[tuple[int, bytes, bytes | None]]) -> None:
        """The tables from changelog rows (JoinsTable.apply_changelog_batch: J rows bring
        their I and X index rows)."""
        for n, key, raw in changelog:
            io = self.ios[n]
            value = None if raw is None else orjson.loads(raw)
            if n != 1:
                io.write(P, [(orjson.loads(key), raw, value)])
                continue
            io.write(P, [(key, raw, value)])
            if key[:1] == JOIN:
                k, t, jid = split_join_key(key)
                if raw is None:
                    if io.get(P, id_key(k, jid)) == t:
                        io.write(P, [(id_key(k, jid), None, None)])
                else:
                    io.write(P, [(id_key(k, jid), b"", t), (expiry_key(P, t, k), b"", 1)])

    def record(self, topic: str, offset: int, value: dict[str, Any]) -> list[Any]:
        """JoinEngine.on_record / on_tick, for one partition."""
        spec, state = self.spec, self.state
        src = [INDEX[topic], offset]
        clock = state.stream_time(P)
        if topic == TICKS:
            if clock is None:
                return []
            revs, _ = state.on_tick(P, clock, clock - spec.retention_ms, src)
            return revs
        key = value[spec.events.key if topic == EVENTS else spec.dimension.key]
        t = value["event_time"]
        if value.get("_end"):  # a tombstone: the key's version ends at t (app.logic.histories)
            rec, version = None, ended_at(t)
        else:
            rec = self.parse[topic](key.encode(), orjson.dumps(value), None)
            version = None if topic == EVENTS else spec.version_of(rec)
        if clock is not None and t < clock - spec.retention_ms:  # late: to etj-late
            if topic == EVENTS:
                return state.on_late(P, key, src, jid=value["id"])
            return state.on_late(P, key, src, v=version)
        clock = state.advance(P, t)
        horizon = clock - spec.retention_ms
        if topic == EVENTS:
            revs, _ = state.on_event(P, spec.event_of(rec), horizon, horizon, src)
        else:
            revs = state.on_version(P, key, version, horizon, horizon, src)
        return revs

    def batch(
        self, records: list[tuple[str, int, Any]]
    ) -> tuple[list[Any], list[Any], dict[str, list[int]]]:
        """DurableLoop.handle + DeliveryPipeline.hand_over: (changelog rows, outputs, acks)."""
        outs: list[Any] = []
        acks: dict[str, list[int]] = {}
        for topic, offset, value in records:
            outs += self.record(topic, offset, value)
            span = acks.setdefault(topic, [offset, offset + 1])
            span[1] = offset + 1
            self.handled.acked(topic, P, offset, offset + 1)
        for topic, (first, _) in acks.items():
            self.acked.handled(topic, P, first)
        self.state.end_batch()
        rows = [
            (n, key, raw) for n, ov in enumerate(self.overlays) for _, _, key, raw in ov.flush()
        ]
        return rows, outs, acks

    def ack(self, acks: dict[str, list[int]]) -> None:
        for topic, (first, end) in acks.items():
            self.acked.acked(topic, P, first, end)


def interleave(draw: Any, streams: dict[str, list[Any]]) -> list[Any]:
    """The streams' records, each stream in order, interleaved as drawn."""
    heads = dict.fromkeys(streams, 0)
    out = []
    while any(heads[t] < len(s) for t, s in streams.items()):
        live = sorted(t for t, s in streams.items() if heads[t] < len(s))
        t = draw(st.sampled_from(live))
        out.append(streams[t][heads[t]])
        heads[t] += 1
    return out


def cut(draw: Any, items: list[Any]) -> list[list[Any]]:
    """``items`` in batches of drawn sizes."""
    out, i = [], 0
    while i < len(items):
        n = draw(st.integers(1, 4))
        out.append(items[i : i + n])
        i += n
    return out


def scenario(draw: Any) -> dict[str, Any]:
    """Records of the mood join (left, ``before``) or the movie join (inner,
    ``at-or-before-else-earliest``), two keys, event ids that may repeat (an event re-using
    its id with another value or time revises its join)."""
    movies = draw(st.booleans())
    n = draw(st.integers(2, 14))
    streams: dict[str, list[Any]] = {EVENTS: [], MOODS: [], TICKS: []}
    for _i in range(n):
        kind = draw(st.sampled_from([EVENTS, EVENTS, MOODS, MOODS, TICKS]))
        if kind == TICKS:
            streams[kind].append((kind, len(streams[kind]), None))
            continue
        t = draw(st.integers(0, 40))
        key = draw(st.sampled_from(["a", "b"]))
        off = len(streams[kind])
        if kind == EVENTS and movies:
            value = {
                "id": f"e{draw(st.integers(0, 3))}-{key}",
                "movie_id": key,
                "user_id": "u",
                "rating": draw(st.sampled_from([1.0, 2.0])),
                "event_time": t,
            }
        elif kind == EVENTS:
            value = {
                "consultant": key,
                "recommendation": draw(st.sampled_from(["x", "y"])),
                "event_time": t,
                "id": f"e{draw(st.integers(0, 3))}-{key}",
            }
        elif movies:
            value = {
                "movie_id": key,
                "title": draw(st.sampled_from(["m", "n", "o"])),
                "event_time": t,
            }
        else:
            value = {"name": key, "mood": draw(st.sampled_from(["m", "n", "o"])), "event_time": t}
        if kind == MOODS and draw(st.integers(0, 3)) == 0:  # a tombstone: an end at t
            value = {("movie_id" if movies else "name"): key, "event_time": t, "_end": True}
        streams[kind].append((kind, off, value))
    first_order = interleave(draw, streams)
    seen = draw(st.integers(1, len(first_order)))
    return {
        "streams": streams,
        "first": first_order[:seen],
        "spec": movie_spec if movies else mood_spec,
        # every record within the retention: a join whose record is late when it comes
        # again may be purged first (findings.md, "Revisions 1 and 2 of a join missing
        # after a kill -9": open); the late record itself, test_a_record_late_...
        "retention": 1000,
        "review": draw(st.sampled_from([None, 10, 1000])),
    }


def gaps(log: list[Any], made: list[Any]) -> dict[str, list[int]]:
    """Per join id with a number missing: the numbers in the log. ``made``: every revision
    made from a state the broker has (each such join's numbers must all be in the log, up to
    the greatest made: a join whose every send was lost counts too)."""
    numbers: dict[str, set[int]] = {}
    for r in log:
        numbers.setdefault(r.id, set()).add(r.revision)
    top: dict[str, int] = {}
    for r in made:
        top[r.id] = max(top.get(r.id, 0), r.revision)
    return {
        jid: sorted(numbers.get(jid, ()))
        for jid in {*numbers, *top}
        if numbers.get(jid, set())
        != set(range(1, max(numbers.get(jid, {0}) | {top.get(jid, 0)}) + 1))
    }


def run(draw: Any, s: dict[str, Any]) -> tuple[list[Any], list[Any], dict[str, int]]:
    """The whole story (module docstring); the output log, the revisions made from a state the
    broker has (the first process's durable batches', the second's), the committed offsets."""
    spec = spec_of(s["retention"], s["review"], s["spec"])
    first = Process(spec)
    lag = draw(st.integers(0, 4))  # batches handled before one is acked
    batches = cut(draw, s["first"])
    done = []  # per batch: (changelog rows, outputs, acks)
    for k, b in enumerate(batches):
        done.append(first.batch(b))
        # batches before k - lag are acked by now (their outputs durable)
        if k - lag >= 0:
            first.ack(done[k - lag][2])
    acked_by_kill = max(0, len(batches) - lag)
    # the kill: changelog of c batches, outputs of o <= c (at least those acked)
    c = draw(st.integers(acked_by_kill, len(batches)))
    o = draw(st.integers(acked_by_kill, c))
    cm = draw(st.integers(0, acked_by_kill))  # batches the last commit covered
    committed: dict[str, int] = {}
    for _, _, acks in done[:cm]:
        for topic, (_, end) in acks.items():
            committed[topic] = max(committed.get(topic, 0), end)
    log = [r for _, outs, _ in done[:o] for r in outs]
    made = [r for _, outs, _ in done[:c] for r in outs]
    second = Process(spec, committed)
    second.recover([row for rows, _, _ in done[:c] for row in rows])
    rest = {t: [r for r in recs if r[1] >= committed.get(t, 0)] for t, recs in s["streams"].items()}
    batches = cut(draw, interleave(draw, rest))
    rebalance = draw(st.integers(0, len(batches)))  # after this many batches (none: all)
    for b in batches[:rebalance]:
        _, outs, acks = second.batch(b)
        log += outs
        second.ack(acks)
        if draw(st.booleans()):  # a commit
            for topic, (_, end) in acks.items():
                second.committed[topic] = max(second.committed.get(topic, 0), end)
    if rebalance < len(batches):
        # a rebalance (the dead member leaves the group): the batches in flight delivered,
        # what waits dropped, nothing known acked nor on its way; read again from the
        # committed offsets, and whatever came since
        second.acked.clear()
        second.handled.clear()
        again = {
            t: [r for r in recs if r[1] >= second.committed.get(t, 0)]
            for t, recs in s["streams"].items()
        }
        for b in cut(draw, interleave(draw, again)):
            _, outs, acks = second.batch(b)
            log += outs
            second.ack(acks)
    return log, made + log, committed


def mood(key: str, t: int, value: str) -> dict[str, Any]:
    return {"name": key, "mood": value, "event_time": t}


def rec(key: str, t: int, jid: str, value: str = "book") -> dict[str, Any]:
    return {"consultant": key, "recommendation": value, "event_time": t, "id": jid}


def numbers(log: list[Any], jid: str) -> list[int]:
    return [r.revision for r in log if r.id == jid]


@pytest.mark.unit
def test_a_re_delivered_event_that_makes_a_new_revision_sends_the_unsent_ones_first():
    """1. the first process: an event, then the same id with another recommendation, in one
    batch: revisions 1 and 2; the changelog row (revision 2, revision 1 unsent) reaches the
    broker, the outputs do not. 2. the fresh process reads both again: the stored join says
    "y", so the first record is no duplicate (revision 3, "x") and the second neither
    (revision 4). Before the fix they sent 3 and 4 only."""
    spec = spec_of(1000, None)
    first = Process(spec)
    records = [(EVENTS, 0, rec("c1", 10, "r1", "x")), (EVENTS, 1, rec("c1", 10, "r1", "y"))]
    rows, outs, _ = first.batch(records)
    assert numbers(outs, "r1") == [1, 2]  # lost with the kill
    second = Process(spec)
    second.recover(rows)
    _, log, _ = second.batch(records)
    assert sorted(set(numbers(log, "r1"))) == [1, 2, 3, 4]
    assert [r.revision for r in log if not r.again] == [3, 4]  # the new ones, counted once


@pytest.mark.unit
def test_a_join_whose_new_revision_comes_first_in_the_new_process_is_gap_free():
    """The CI run's shape (join rec-21-57): the first process answers an event with "sad"
    (revision 1), a late mood "excited" corrects it (revision 2); its changelog rows reach
    the broker, the outputs of both do not. The new process handled the event again and made
    revision 3 from the stored revision 2 before the mood's re-delivery made revision 4: it
    saw a history without "excited" (why is not known: its row is left out of the recovery
    here). Before the fix the log held 3 and 4 only."""
    spec = spec_of(1000, None)
    first = Process(spec)
    rows, outs, _ = first.batch(
        [(MOODS, 0, mood("c10", 25, "sad")), (EVENTS, 0, rec("c10", 57, "rec-57"))]
    )
    rows2, outs2, _ = first.batch([(MOODS, 1, mood("c10", 55, "excited"))])
    assert numbers(outs + outs2, "rec-57") == [1, 2]  # lost with the kill
    second = Process(spec)
    excited = [r for r in rows2 if r[1][:1] == b"V"]
    assert len(excited) == 1
    second.recover([r for r in rows + rows2 if r not in excited])
    _, log, _ = second.batch(
        [(EVENTS, 0, rec("c10", 57, "rec-57")), (MOODS, 1, mood("c10", 55, "excited"))]
    )
    assert [r.revision for r in log if not r.again] == [3, 4]
    assert sorted(set(numbers(log, "rec-57"))) == [1, 2, 3, 4]


@pytest.mark.unit
def test_a_record_late_when_it_comes_again_re_emits_what_it_made():
    """1. the first process answers an event at 0 (revision 1), then a mood at 40 moves the
    stream time past 0 + the retention (30); the changelog rows of both reach the broker, the
    outputs do not. 2. the fresh process recovers stream time 40: the event, delivered again
    first (event-time order), is late now and goes to etj-late. Before the fix it re-emitted
    nothing: the join's only revision never reached the log."""
    spec = spec_of(30, None)
    first = Process(spec)
    rows, outs, _ = first.batch([(EVENTS, 0, rec("c1", 0, "r1"))])
    rows2, _, _ = first.batch([(MOODS, 0, mood("c1", 40, "sad"))])
    assert numbers(outs, "r1") == [1]  # lost with the kill
    second = Process(spec)
    second.recover(rows + rows2)
    _, log, _ = second.batch([(EVENTS, 0, rec("c1", 0, "r1")), (MOODS, 0, mood("c1", 40, "sad"))])
    assert [(r.id, r.revision, r.again) for r in log] == [("r1", 1, True)]


@pytest.mark.unit
def test_a_version_that_answered_as_the_earliest_re_emits_what_it_made():
    """Movies (inner, at-or-before-else-earliest). 1. the first process: a rating at 10 waits;
    movie version A at 50 answers it as the earliest (revision 1); version B at 5 takes over
    (revision 2); the changelog rows reach the broker, the outputs do not. 2. the fresh
    process reads A again first (offset order): a duplicate, whose re-emits look only at
    joins at or after 50 once an earlier version exists, so the rating's revision 1 (made by
    A) was not re-sent, and after A was handled it counted as on its way: B's re-delivery
    re-sent revision 2 only."""
    spec = spec_of(1000, None, movie_spec)
    first = Process(spec)
    rating = {"id": "r1", "movie_id": "m1", "user_id": "u", "rating": 4.0, "event_time": 10}
    a = {"movie_id": "m1", "title": "A", "event_time": 50}
    b = {"movie_id": "m1", "title": "B", "event_time": 5}
    records = [(EVENTS, 0, rating), (MOODS, 0, a), (MOODS, 1, b)]
    rows, outs, _ = first.batch(records)
    assert numbers(outs, "r1") == [1, 2]  # lost with the kill
    second = Process(spec)
    second.recover(rows)
    _, log, _ = second.batch([records[1], records[2], records[0]])
    assert sorted(set(numbers(log, "r1"))) == [1, 2]


@pytest.mark.unit
@hsettings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_kill_9_then_a_fresh_process_leaves_no_revision_number_out(data):
    s = scenario(data.draw)
    log, made, committed = run(data.draw, s)
    assert gaps(log, made) == {}, (gaps(log, made), committed)

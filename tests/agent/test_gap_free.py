"""Gap-free revision logs after a crash, through the real agents (no broker).

A crash between a batch's changelog rows and its outputs leaves revisions in state that never
reached the topic; when a later revision superseded one of them before the restart, re-emitting
only the current revision would leave its number missing. These tests drive a join through
three revisions, "lose" every output, and check what the restarted engine re-emits: every
revision whose source record's offset is not committed, in order and exactly as first emitted;
nothing once everything is committed (app.logic.event_join.Join.unsent,
``undelivered_revisions``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

from app.agents.event_join import engines
from app.faust_app import app
from app.inputs.inbox import Batch
from app.loop.acks import AckedRuns
from tests.agent.conftest import Record

T = 1_790_000_000_000


class _Committed(dict):
    """Faust's committed offsets with every input committed up to ``upto`` (exclusive)."""

    def __init__(self, upto: int) -> None:
        super().__init__()
        self.upto = upto

    def get(self, tp: Any, default: Any = None) -> Any:
        return self.upto


class _Forgets(AckedRuns):
    """A loop's acked records that keep nothing (app.loop.acks.AckedRuns): as if every
    output were lost in a crash, the harness' sends notwithstanding."""

    def acked(self, topic: str, partition: int, first: int, end: int) -> None:
        pass


@contextmanager
def committed_upto(offset: int, restarted: bool = True) -> Iterator[None]:
    """Every input committed up to ``offset``, and that is all the engines know delivered;
    ``restarted``: nor do they know of any output on its way (a worker that handled none of
    these records before: the one after a crash). Not ``restarted``: the worker that handles
    them first (their outputs are on their way; the crash loses them later)."""
    with ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(app.consumer, "_committed_offset", _Committed(offset), create=True)
        )
        for engine in engines.values():
            stack.enter_context(mock.patch.object(engine.loop, "acked", _Forgets()))
            if restarted:
                stack.enter_context(mock.patch.object(engine.loop, "handled", _Forgets()))
        yield


def movie(title: str, t: int) -> dict[str, Any]:
    return {"movie_id": "m1", "title": title, "event_time": t}


def mood(name: str, t: int) -> dict[str, Any]:
    return {"name": "ann", "mood": name, "event_time": t}


async def test_per_join_a_redelivered_version_re_emits_superseded_unsent_revisions(join_harness):
    async with join_harness("movies") as h:
        with committed_upto(0, restarted=False):  # nothing committed: every output may be lost
            await h.dimension(movie("A", T))
            await h.event(
                {"id": "r1", "movie_id": "m1", "user_id": "u", "rating": 4.0, "event_time": T + 10}
            )
            await h.dimension(movie("B", T + 5))
            await h.dimension(movie("C", T + 7))
            first = h.outputs()
            assert [(r["revision"], r["title"]) for r in first] == [(1, "A"), (2, "B"), (3, "C")]
        with committed_upto(0):
            # as after a crash that lost all three outputs: the records come again
            await h.dimension(movie("C", T + 7))
            assert h.outputs()[len(first) :] == first  # 1, 2, 3 again, exactly as emitted
            await h.event(
                {"id": "r1", "movie_id": "m1", "user_id": "u", "rating": 4.0, "event_time": T + 10}
            )
            assert h.outputs()[2 * len(first) :] == first
        n = len(h.outputs())
        with committed_upto(10**12):  # every source committed: all delivered, nothing again
            await h.dimension(movie("C", T + 7))
        assert h.outputs()[n:] == []


async def test_per_join_every_lost_revision_comes_again_as_commits_advance(join_harness):
    # A rating waits for its movie; versions A, B, C then make revisions 1, 2, 3. All three
    # outputs are lost in a crash. Flow control delivers the records again in event-time
    # order (the versions first), and each is committed once handled. Version A no longer
    # answers the rating, yet it must re-emit the revision it made before its own offset is
    # committed: after that, revision 1 counts as delivered. The chaos run found the gap.
    rating = {"id": "r1", "movie_id": "m1", "user_id": "u", "rating": 4.0, "event_time": T + 10}
    first_order = [
        ("event", rating, 20),
        ("dimension", movie("A", T), 11),
        ("dimension", movie("B", T + 5), 12),
        ("dimension", movie("C", T + 7), 13),
    ]
    async with join_harness("movies") as h:
        with committed_upto(0, restarted=False):
            for side, value, offset in first_order:
                await getattr(h, side)(value, offset=offset)
        first = {r["revision"]: r for r in h.outputs()}
        assert [(n, r["title"], r["cause"]) for n, r in sorted(first.items())] == [
            (1, "A", "late-dimension"),
            (2, "B", "late-dimension"),
            (3, "C", "late-dimension"),
        ]
        n = len(h.outputs())
        for side, value, offset in [*first_order[1:], first_order[0]]:
            with committed_upto(min(offset, 14)):  # those before it are committed (r1: 20)
                await getattr(h, side)(value, offset=offset)
        again = h.outputs()[n:]
        assert {r["revision"] for r in again} == {1, 2, 3}, again
        assert all(r == first[r["revision"]] for r in again), "re-emitted exactly as emitted"


async def test_moods_a_redelivered_version_re_emits_superseded_unsent_revisions(join_harness):
    async with join_harness("moods") as h:
        with committed_upto(0, restarted=False):
            await h.dimension(mood("sad", T))
            await h.event(
                {"consultant": "ann", "recommendation": "tea", "event_time": T + 10, "id": "x"}
            )
            await h.dimension(mood("ok", T + 5))
            await h.dimension(mood("happy", T + 7))
            first = h.outputs()
            assert [(r["revision"], r["mood"]) for r in first] == [
                (1, "sad"),
                (2, "ok"),
                (3, "happy"),
            ]
        with committed_upto(0):
            # after a crash the records come again: the last version re-emits every revision
            await h.dimension(mood("happy", T + 7))
            assert h.outputs()[len(first) :] == first
            await h.tick()  # a tick re-emits nothing
            assert len(h.outputs()) == 2 * len(first)
        n = len(h.outputs())
        with committed_upto(10**12):
            await h.dimension(mood("happy", T + 7))
        assert h.outputs()[n:] == []


async def test_committed_sources_are_dropped_from_state_when_the_row_is_next_written(join_harness):
    async with join_harness("moods") as h:
        with committed_upto(0):
            await h.dimension(mood("sad", T))
            await h.event(
                {"consultant": "ann", "recommendation": "tea", "event_time": T + 10, "id": "x"}
            )
            await h.dimension(mood("ok", T + 5))
        j = h.joins("ann")["x"]
        assert [u[1] for u in j.unsent] == [1]  # revision 1 kept: its source is uncommitted
        with committed_upto(10**12):
            await h.dimension(mood("happy", T + 7))
        j = h.joins("ann")["x"]
        assert (j.revision, j.unsent) == (3, [])  # revisions 1 and 2 dropped: delivered
        assert j.source[0] == 1  # revision 3 came from the dimension (input 1)


async def test_acked_sources_are_dropped_before_any_commit(join_harness):
    # Nothing is committed, but the broker took every output (the harness' sends succeed and
    # the loop acks each record): a superseded revision is known delivered at once, so the row
    # does not carry it. With the committed offset alone, every revision superseded between
    # two commits stayed in the row: a row of recent joins outgrew the 1 MB request limit.
    async with join_harness("moods") as h:
        with mock.patch.object(app.consumer, "_committed_offset", _Committed(0), create=True):
            await h.dimension(mood("sad", T), offset=100)
            await h.event(
                {"consultant": "ann", "recommendation": "tea", "event_time": T + 10, "id": "x"},
                offset=200,
            )
            await h.dimension(mood("ok", T + 5), offset=101)
            await h.dimension(mood("happy", T + 7), offset=102)
            in_log = [
                h.engine.loop.acked.holds(h.spec.dimension.topic, 0, o) for o in range(99, 104)
            ]
            assert in_log == [False, True, True, True, False]
            # a record Faust read past (offset 104 acked, 103 never handled): a new run
            await h.dimension(mood("calm", T + 8), offset=104)
            await h.dimension(mood("glad", T + 9), offset=105)
            in_log = [
                h.engine.loop.acked.holds(h.spec.dimension.topic, 0, o) for o in range(101, 107)
            ]
            assert in_log == [False, False, False, True, True, False]  # 101-102: forgotten
        assert [(r["revision"], r["mood"]) for r in h.outputs()] == [
            (1, "sad"),
            (2, "ok"),
            (3, "happy"),
            (4, "calm"),
            (5, "glad"),
        ]
        j = h.joins("ann")["x"]
        assert (j.revision, j.unsent) == (5, [])  # each superseded one was acked already


def test_a_record_handled_again_or_a_rebalance_makes_acked_offsets_unknown():
    # handled again (a seek back, a re-delivery), a record may make a revision it did not make
    # the first time (a tick's revisit, a held event released): not in the log until re-acked
    loop = engines["moods"].loop
    ticks = loop.ticks
    loop.acked.clear()
    loop.acked.acked(ticks, 0, 100, 110)
    tick = Record(ticks, 0, 104, None, b"{}", 0)
    with mock.patch.object(loop.engine, "on_tick", return_value=[]):
        loop.handle([Batch(ticks, 0, [tick], None, app.consumer_generation_id)])
    assert [loop.acked.holds(ticks, 0, o) for o in (99, 100, 103, 104, 109)] == [
        False,
        True,
        True,
        False,
        False,
    ]
    loop.drop_waiting()  # a rebalance starts: the partition may go, and come back
    assert not loop.acked.holds(ticks, 0, 100)


# --- a re-delivered record writes its rows again ------------------------------------------------
#
# After a kill -9, a worker that kept its data directory (RocksDB) holds the rows of records it
# handled whose changelog rows were lost with the process. Those records come again (their
# offsets were not committed), find their rows and change nothing: unless they write the rows
# again, the next owner of the partition (recovering from the changelog) never gets them. The
# 10-minute chaos run with batching showed it: ratings waiting for their movie never answered.


def state_rows(h: Any) -> dict[tuple[str, bytes], bytes]:
    """The join-state changelog rows sent so far: (topic, key) -> value (the stream clock
    aside)."""
    return {
        (t, k): v
        for t, _, k, v in h.sent.changelog
        if t.endswith(("-joins-changelog", "-history-changelog"))
    }


async def test_per_join_a_redelivered_record_writes_its_rows_again(join_harness):
    rating = {"id": "r1", "movie_id": "m9", "user_id": "u", "rating": 4.0, "event_time": T + 10}
    async with join_harness("movies") as h:
        await h.event(rating)  # waits for its movie: state only, no output yet
        await h.dimension(movie("A", T))
        first = state_rows(h)
        assert any(t.endswith("-joins-changelog") for t, _ in first)
        h.sent.changelog.clear()  # lost with the process; the local store still has them
        await h.dimension(movie("A", T))
        await h.event(rating)
        again = state_rows(h)
        assert again == first, "every row the records wrote is written again, unchanged"


async def test_moods_a_redelivered_record_writes_its_rows_again(join_harness):
    async with join_harness("moods") as h:
        await h.dimension(mood("sad", T))
        await h.event(
            {"consultant": "ann", "recommendation": "tea", "event_time": T + 10, "id": "x"}
        )
        first = state_rows(h)
        assert any(k[:1] == b"V" for t, k in first if t.endswith("-joins-changelog")), first
        h.sent.changelog.clear()
        await h.dimension(mood("sad", T))
        await h.event(
            {"consultant": "ann", "recommendation": "tea", "event_time": T + 10, "id": "x"}
        )
        assert state_rows(h) == first

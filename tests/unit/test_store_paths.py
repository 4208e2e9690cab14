"""One join, three ways to its store, the same answers and the same changelog: the engine's
reads and writes of the joins table go to the memory store's split mapping directly, to
RocksDB through a batch's write buffer (written once per batch, its rows merged into the
batch's reads: :mod:`app.state.write_buffer`), or through the plain ``StoreIO`` interface
(:class:`app.state.overlay.MemoryIO`, what the crash property tests drive).

Scenario: records in (events and versions of a few keys, times with ties, ids re-used, late
versions, ticks that purge and review, batch ends), then for every store the revisions each
record made (as the output topic carries them), each batch's changelog rows (partition, key,
bytes, in order) and the rows left in the table at the end must be the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faust
import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.joins.catalog import mood_spec, movie_spec
from app.joins.joins_table import JoinsTable, joins_overlay
from app.joins.resolve import resolve
from app.joins.state import JoinState
from app.logic.event_join import Event
from app.settings import Settings
from app.state.overlay import MemoryIO, Overlay
from app.state.range_scan import range_table
from app.state.store_io import StoreIO

P = 1  # partition
RETENTION = 60


def joins_table(store: str, datadir: Path, name: str) -> Any:
    app = faust.App(
        f"paths-{name}", broker="kafka://127.0.0.1:1", store=f"{store}://", datadir=str(datadir)
    )
    return range_table(app, "rows", default=None, partitions=2, table_class=JoinsTable)


_TABLES: dict[str, Any] = {}


def empty_table(store: str, datadir: Path) -> Any:
    """The store's joins table, made once (a Faust app per example is slow) and emptied."""
    table = _TABLES.get(store)
    if table is None:
        table = _TABLES[store] = joins_table(store, datadir, store)
    io = StoreIO(table)
    if store == "memory":
        io.memory_data().clear()
        io.key_partitions().clear()
    else:
        rows = {k: None for k, _ in io.scan(P, b"\x00", b"\xff")}
        io.write_raw(P, rows)
    return table


class Run:
    """One engine over one way to the joins table."""

    def __init__(self, spec: Any, joins_io: Any) -> None:
        self.io = joins_io
        self.state = JoinState(
            spec,
            Overlay(MemoryIO(bytes_keys=False)),
            joins_overlay(joins_io),
            Overlay(MemoryIO(bytes_keys=False)),
        )
        self.log: list[Any] = []

    def revisions(self, revs: list[Any]) -> None:
        spec = self.state.spec
        self.log.append([(orjson.dumps(spec.to_wire(r)), r.again) for r in revs])

    def flush(self) -> None:
        self.state.end_batch()
        rows = self.state.joins.flush()
        self.log.append([(p, k, v) for _, p, k, v in rows])

    def rows(self) -> list[tuple[bytes, Any]]:
        """Every row of the table, in key order (the id rows too: no range read sees them in
        the memory store, which keeps them apart)."""
        io = self.io
        if isinstance(io, MemoryIO):
            return sorted((k, v) for (p, k), v in io.data.items() if p == P)
        data = io.memory_data()
        if data is not None:
            return sorted(data.items())
        return list(io.scan(P, b"\x00", b"\xff"))


steps = st.lists(
    st.tuples(
        st.sampled_from(["v", "v", "e", "e", "e", "tick", "end"]),
        st.integers(0, 40),  # coarse times: ties between versions, events at a version's time
        st.sampled_from(["a", "b", "c"]),  # a version's value
        st.sampled_from(["k", "q", "kq"]),  # a key ("k" a prefix of "kq": rows side by side)
        st.integers(0, 6),  # an event's id (re-used: an event again, or moved in time)
    ),
    min_size=1,
    max_size=50,
)


@pytest.mark.unit
@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps, rule=st.sampled_from([mood_spec, movie_spec]), review=st.booleans())
def test_every_way_to_the_store_gives_the_same_revisions_and_changelog(
    tmp_path_factory, steps, rule, review
):
    spec = resolve(
        {
            **rule(Settings()),
            "retention_ms": RETENTION,
            "window_ms": None,
            "review_lag_ms": 20 if review else None,
        }
    )
    folder = tmp_path_factory.getbasetemp() / "store-paths"
    runs = [
        Run(spec, MemoryIO()),
        Run(spec, StoreIO(empty_table("memory", folder))),
        Run(spec, StoreIO(empty_table("rocksdb", folder))),
    ]
    clock: int | None = None
    for n, (kind, t, value, key, jid) in enumerate(steps):
        t *= 3
        if kind == "end":
            for run in runs:
                run.flush()
            continue
        if kind == "tick":
            if clock is not None:
                for run in runs:
                    revs, _ = run.state.on_tick(P, clock, clock - RETENTION, [2, n])
                    run.revisions(revs)
            continue
        clock = max(clock or t, t)
        horizon = clock - RETENTION
        if t < horizon:
            continue  # late: the agent routes it away before the state
        for run in runs:
            run.state.advance(P, t)
            if kind == "v":
                revs = run.state.on_version(P, key, [t, value], horizon, horizon, [1, n])
            else:
                payload = ("rec",) if rule is mood_spec else ("u", 1.0)
                revs, _ = run.state.on_event(
                    P, Event(key, f"id{jid}", t, payload), horizon, horizon, [0, n]
                )
            run.revisions(revs)
    for run in runs:
        run.flush()
    plain, split, buffered = runs
    assert split.log == plain.log
    assert buffered.log == plain.log
    assert split.rows() == plain.rows() == buffered.rows()


@pytest.mark.unit
@hsettings(max_examples=200, deadline=None)
@given(
    versions=st.lists(st.tuples(st.integers(0, 30), st.sampled_from("abc")), max_size=12),
    times=st.lists(st.integers(0, 35), min_size=1, max_size=8),
    rule=st.sampled_from([mood_spec, movie_spec]),
)
def test_a_review_reads_a_keys_versions_once_and_answers_as_a_read_per_join(versions, times, rule):
    """A revisit reads the versions a bucket's joins can answer with once
    (``JoinState._history``); as_of over them answers every join as the per-join read
    (``_answering``) does."""
    spec = resolve({**rule(Settings()), "retention_ms": 10**9, "window_ms": None})
    state = Run(spec, MemoryIO()).state
    for t, value in versions:
        state.on_version(P, "k", [t, value], None, None)
    times = sorted(times)
    history = state._history(P, "k", times[0], times[-1])
    for t in times:
        assert state.rules.answer(history, t) == state.rules.answer(
            state._answering(P, "k", t, None), t
        ), (t, history)


@pytest.mark.unit
def test_a_range_wider_than_a_key_is_read_whole_from_the_split_mapping():
    """A bound shorter than a key's prefix (b"V": every version) is in no group: the range
    reads every key's rows (it read none: b"V" was taken for a group of its own)."""
    from app.joins.keys import version_key
    from app.state.split_sorted import SplitSortedDict

    data = SplitSortedDict(JoinsTable.point_key, JoinsTable.group_key, True, JoinsTable.group_end)
    keys = sorted(version_key(k, t, ["x"]) for k in ("a", "ab", "b") for t in (1, 2))
    for k in keys:
        data[k] = [1]
    assert [k for k, _ in data.items_range(b"V", b"W")] == keys
    assert [k for k, _ in data.items_range(b"V\x00", b"W")] == keys

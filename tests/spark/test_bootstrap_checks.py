"""What the bootstrap job refuses before it writes anything (:func:`app.batch.bootstrap.check`),
each with the reason a user needs: the broker's answers stood in for (the broker test runs the
real ones: tests/spark/test_bootstrap_broker.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.batch import bootstrap as B
from app.batch.state_files import Target
from app.joins.catalog import movie_spec
from app.joins.resolve import resolve
from app.settings import Settings
from app.state.snapshot_store import BootstrapMarker, Snapshots

CHANGELOG = "etj-movies-dimension-changelog"


@pytest.fixture
def job(tmp_path, monkeypatch):
    """(check(inputs) -> marker, the broker's answers to set, the store)."""
    spec = resolve(movie_spec(Settings()))
    target = Target(CHANGELOG, 4, "fp", f"file://{tmp_path}", "127.0.0.1:1", Settings(), 1 << 20)
    broker = SimpleNamespace(members=[0], ends={})

    async def broker_state(target, group, topics):
        members = broker.members.pop(0) if len(broker.members) > 1 else broker.members[0]
        return members, broker.ends

    monkeypatch.setattr(B, "_broker_state", broker_state)
    monkeypatch.setattr(B.time, "sleep", lambda s: None)
    snaps = Snapshots(f"file://{tmp_path}")
    steps = SimpleNamespace(say=lambda text: None)

    def check(inputs=("/lake/m.parquet",), wait_s=0.0):
        return B.check(target, spec, snaps, list(inputs), "etj", wait_s, steps)

    return check, broker, snaps, spec


def test_a_first_load_passes(job):
    check, broker, _, spec = job
    broker.ends = {
        CHANGELOG: dict.fromkeys(range(4), 0),
        spec.dimension.topic: dict.fromkeys(range(4), 9),
    }
    assert check() is None


def test_a_running_worker_is_waited_for_then_refused(job):
    check, broker, _, _ = job
    broker.members = [2, 1, 0]
    assert check(wait_s=60) is None  # the members left while it waited
    broker.members = [1]
    with pytest.raises(B.BootstrapError, match="has 1 member.*stop the join's workers first"):
        check(wait_s=0)


def test_a_changelog_with_rows_is_a_table_that_has_a_state(job):
    check, broker, _, _ = job
    broker.ends = {CHANGELOG: {0: 0, 1: 12, 2: 0, 3: 0}}
    with pytest.raises(B.BootstrapError, match=r"holds rows already \(end offsets \{1: 12\}\)"):
        check()


def test_a_second_load_is_refused(job):
    check, _, snaps, _ = job
    snaps.mark_bootstrap(BootstrapMarker(CHANGELOG, "j1", "done", 1, ["/lake/m.parquet"], 2))
    with pytest.raises(B.BootstrapError, match="was bootstrapped by job j1"):
        check()


def test_an_unfinished_attempt_is_run_again_on_the_same_inputs_only(job):
    check, broker, snaps, _ = job
    broker.ends = {CHANGELOG: {0: 500, 1: 0, 2: 7, 3: 0}}  # what the failed attempt wrote
    failed = BootstrapMarker(CHANGELOG, "j1", "failed", 1, ["/lake/m.parquet"], error="OOM")
    snaps.mark_bootstrap(failed)
    assert check() == failed
    broker.members = [2]  # workers that joined after its marker wait for it: not a refusal
    assert check() == failed
    with pytest.raises(B.BootstrapError, match="run it again on the same inputs"):
        check(inputs=["/lake/other.parquet"])


def test_a_dimension_topic_of_another_partition_count_is_refused(job):
    check, broker, _, spec = job
    broker.ends = {spec.dimension.topic: {0: 5, 1: 5}}
    with pytest.raises(B.BootstrapError, match="has 2 partitions, join movies 4"):
        check()

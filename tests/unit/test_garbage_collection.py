"""The worker collects cyclic garbage less often than CPython's default (app.runtime):
its tables are large and long-lived, and the default's collections were 15 % of a replay."""

import gc
import subprocess
import sys

from app import runtime


def test_use_sets_the_thresholds_and_keeps_the_collector_on():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert runtime.use_gc_thresholds() == runtime.GC_THRESHOLDS
        assert gc.get_threshold() == runtime.GC_THRESHOLDS
        assert gc.isenabled()
        assert runtime.GC_THRESHOLDS[0] > 700  # less often than CPython's default
    finally:
        gc.set_threshold(*before)


def test_the_worker_module_applies_them():
    out = subprocess.run(
        [sys.executable, "-c", "import gc, app.main; print(gc.get_threshold())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(runtime.GC_THRESHOLDS)


def test_after_a_recovery_what_is_alive_is_frozen():
    """app.runtime.freeze_long_lived: what is alive when the tables are recovered (the tables,
    the app) moves to the permanent generation, which full collections no longer traverse."""
    long_lived = [[i] for i in range(1000)]
    gc.unfreeze()
    try:
        frozen = runtime.freeze_long_lived()
        assert frozen >= len(long_lived)
        # frozen: in no generation the collector traverses (its count may move as frozen
        # objects die: a fresh clone's run saw 370,475 then 370,473)
        traversed = {id(o) for o in gc.get_objects()}
        assert not any(id(x) in traversed for x in long_lived)
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_the_recovery_freezes_once_it_completes():
    """The worker's recovery calls it when it completes (app.compat.recovery), after Faust's
    own completion."""
    import asyncio
    import types
    from unittest import mock

    from faust.tables.recovery import Recovery

    from app.compat.recovery import EtjRecovery

    calls: list[str] = []

    async def upstream(self, generation_id=0):
        calls.append("upstream")

    fake = types.SimpleNamespace(
        app=types.SimpleNamespace(consumer=types.SimpleNamespace(assignment=lambda: set()))
    )
    with (
        mock.patch.object(Recovery, "on_recovery_completed", upstream),
        mock.patch.object(runtime, "freeze_long_lived", lambda: calls.append("freeze")),
    ):
        asyncio.run(EtjRecovery.on_recovery_completed(fake, 0))
    assert calls == ["upstream", "freeze"]

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
    out = subprocess.run([sys.executable, "-c", "import gc, app.main; print(gc.get_threshold())"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(runtime.GC_THRESHOLDS)

"""`make run` end to end: broker + worker + sample traffic + watch, then a clean stop on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.dev.local_broker import free_port
from tests.harness import Names
from tests.leftovers import PROBE, wait_gone

#: lines of the `watch` command (app/commands/sample_traffic.py), not the banner
JOINED = re.compile(r"rev 1 \[arrival\] joined mood=")
CORRECTION = re.compile(r"rev [2-9]\d* \[(late-dimension|revisit)\] CORRECTION \S+ -> \S+")

CAR = re.compile(r"car +\d+ zone +\d+ fuel \S+ +pollution ")


@contextmanager
def make_run(env: dict[str, str], cwd: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``make run`` (``python -m app.dev.run_local``) in ``cwd``: (process, its output file); on
    leaving, stopped with SIGTERM as Ctrl-C stops it."""
    out = cwd / "run.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.dev.run_local"],
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc, out
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def wait_for_a_correction(proc: subprocess.Popen[bytes], out: Path, timeout_s: float = 150) -> str:
    """The output so far, once it shows a correction (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not CORRECTION.search(out.read_text("utf-8", "replace")):
        assert proc.poll() is None, out.read_text()
        time.sleep(1)
    return out.read_text("utf-8", "replace")


def test_make_run_shows_revisions_and_corrections_then_stops_everything(
    tmp_path: Path, names: Names
) -> None:
    port = free_port()
    probe = uuid.uuid4().hex
    env = {
        **os.environ,
        **names.env,
        "ETJ_WEB_PORT": str(port),
        "ETJ_DATADIR": str(tmp_path / "state"),
        PROBE: probe,
    }
    env.pop("ETJ_BROKER_URL")  # run_local sets it from the broker it starts or is given
    with make_run(env, tmp_path) as (proc, out):
        text = wait_for_a_correction(proc, out)
        assert f"http://127.0.0.1:{port}/" in text
        assert JOINED.search(text), text[-3000:]
        assert CORRECTION.search(text), text[-3000:]
        assert CAR.search(text), text[-3000:]
    text = out.read_text()
    assert "stopped." in text
    # nothing left behind: no process that inherited this run's probe is alive (the children
    # have sessions of their own, so the probe, not the session, finds them)
    assert wait_gone(probe) == {}
    # quiet: nothing before the broker is up, no rows of -INT- from the children
    assert "Unable connect" not in text and "-INT-" not in text, text[:3000]

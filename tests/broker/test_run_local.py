"""`make run` end to end: broker + worker + sample traffic + watch, then a clean stop on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.local_broker import free_port
from tests.harness import Names

#: lines of the `watch` command (app/commands/sample_traffic.py), not the banner
JOINED = re.compile(r"rev 1 \[arrival\] joined mood=")
CORRECTION = re.compile(r"rev [2-9]\d* \[(late-dimension|revisit)\] CORRECTION \S+ -> \S+")

CAR = re.compile(r"car +\d+ zone +\d+ fuel \S+ +pollution ")


def test_make_run_shows_revisions_and_corrections_then_stops_everything(
        tmp_path: Path, names: Names) -> None:
    port = free_port()
    env = {**os.environ, **names.env, "ETJ_WEB_PORT": str(port),
           "ETJ_DATADIR": str(tmp_path / "state")}
    env.pop("ETJ_BROKER_URL")  # run_local sets it from the broker it starts or is given
    out = tmp_path / "run.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "app.run_local"], cwd=tmp_path, env=env,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not CORRECTION.search(out.read_text("utf-8", "replace")):
            assert proc.poll() is None, out.read_text()
            time.sleep(1)
        text = out.read_text("utf-8", "replace")
        assert f"http://127.0.0.1:{port}/" in text
        assert JOINED.search(text), text[-3000:]
        assert CORRECTION.search(text), text[-3000:]
        assert CAR.search(text), text[-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert "stopped." in out.read_text()
    # nothing left behind: no process of this run's session is alive
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout
    assert left.strip() == "", f"processes left running: {left}"

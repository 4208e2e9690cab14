"""`make test`, `make bench` and `make run`, stopped from outside at an awkward moment, leave no
process running: no worker, broker, moto, Spark JVM or container.

Each command runs as a user runs it (``make`` in the checkout) with a probe in its environment
that every process it starts inherits (tests/leftovers.py); it is stopped as a CI timeout stops
it (SIGTERM to make, which passes it on to its recipe) or as Ctrl-C does (SIGINT to the whole
foreground process group), once a worker of its own runs; then nothing may carry the probe.
An interrupted ``make bench`` once left its worker and broker running at 55 % of a core for
whatever ran next on the machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from app.dev.local_broker import free_port
from tests.leftovers import PROBE, carrying, own_run_environ, wait_gone

ROOT = Path(__file__).resolve().parents[2]


def make(
    target: str, tmp_path: Path, **variables: str
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """``make TARGET`` in the checkout, a session of its own (a terminal's foreground group):
    (process, its probe, its output file)."""
    probe = uuid.uuid4().hex
    out = tmp_path / f"make-{target}.out"
    # not an xdist worker's environment: the run under test is a run of its own (it marks and
    # reaps its own processes, tests/conftest.py)
    env = {
        **own_run_environ(),
        PROBE: probe,
        "ETJ_WEB_PORT": str(free_port()),
        "ETJ_DATADIR": str(tmp_path / "state"),
    }
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [
                "make",
                "--no-print-directory",
                "-C",
                str(ROOT),
                target,
                *[f"{k}={v}" for k, v in variables.items()],
            ],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_as_from_a_terminal,
        )
    return proc, probe, out


def _as_from_a_terminal() -> None:
    """In the child before ``make`` starts: SIGINT at its default, as a shell's foreground job
    has it. A disposition of SIG_IGN survives exec: if something in this xdist worker had set
    it (a library, an earlier test), the whole run under test ignored Ctrl-C (a fresh clone's
    CI: ``make test`` ran to its end, exit 0, and ``make run`` never stopped)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_process(
    probe: str, needle: str, proc: subprocess.Popen[bytes], out: Path, timeout_s: float = 180
) -> None:
    """Wait until a process of the run whose command line holds ``needle`` is up."""
    deadline = time.monotonic() + timeout_s
    while not any(needle in cmd for cmd in carrying(PROBE, probe).values()):
        assert proc.poll() is None, out.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no {needle!r} in {timeout_s} s"
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes], how: str) -> int:
    """SIGTERM to make alone (a timeout's kill), or SIGINT to its whole group (Ctrl-C)."""
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(timeout=120)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_make_test_stopped_while_a_worker_runs_leaves_nothing(tmp_path, how):
    proc, probe, out = make(
        "test", tmp_path, ARGS="tests/broker/test_broker_mood_join.py -p no:cacheprovider"
    )
    # found by the probe: the run's own broker and worker (what the check below must not see)
    wait_for_process(probe, "app.main worker", proc, out)
    assert any("tansu" in cmd for cmd in carrying(PROBE, probe).values())
    time.sleep(1)  # mid-test, the worker starting up
    assert stop(proc, how) != 0
    assert wait_gone(probe) == {}, out.read_text(errors="replace")[-3000:]


def test_make_bench_stopped_while_a_worker_runs_leaves_nothing(tmp_path):
    proc, probe, out = make("bench", tmp_path, ARGS="--quick --only throughput")
    wait_for_process(probe, "app.main worker", proc, out)
    assert any("tansu" in cmd for cmd in carrying(PROBE, probe).values())
    time.sleep(1)
    assert stop(proc, "SIGTERM") != 0
    assert wait_gone(probe) == {}, out.read_text(errors="replace")[-3000:]


def test_make_run_stopped_by_ctrl_c_as_it_starts_leaves_nothing_and_says_little(tmp_path):
    """Ctrl-C while the broker is still starting: before it, ``make run`` printed ``Unable
    connect`` lines while it waited for its broker, and every child printed ``-INT-`` rows."""
    proc, probe, out = make("run", tmp_path)
    wait_for_process(probe, "tansu", proc, out)
    stop(proc, "SIGINT")
    assert wait_gone(probe) == {}, out.read_text(errors="replace")[-3000:]
    text = out.read_text(errors="replace")
    assert "stopped." in text
    assert "Unable connect" not in text and "-INT-" not in text, text[-3000:]

"""Nothing left behind: every process a test run or a benchmark run starts ends with it.

A run marks its environment with a fresh ``ETJ_RUN_MARK`` (:func:`mark_this_run`); every process
it starts inherits it (workers, the broker, moto, Spark's JVM, dockerd and its shims), and only
those: the environment is passed down, never up. At the end, :func:`reap` kills whatever still
carries the mark and says what it was, so a process a teardown missed is both stopped and seen.

The end must come, also when the run is stopped from outside: Python's default SIGTERM ends the
process at once, without a ``finally`` or a fixture's teardown, which is how an interrupted
``make bench`` left its worker and broker running at 55 % of a core. :func:`interrupt_on_sigterm`
turns SIGTERM (and SIGHUP) into the ``KeyboardInterrupt`` that Ctrl-C raises, and every cleanup
path runs for both.

A nested run (a test that runs pytest or a benchmark in a subprocess) marks itself anew, so it
reaps its own processes and never its parent's.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARK = "ETJ_RUN_MARK"
#: what a test that stops a whole run puts in that run's environment, to find what it left
#: (the run marks itself anew, but passes this one on untouched)
PROBE = "ETJ_LEFTOVER_PROBE"


def mark_this_run() -> str:
    """A new mark in this process's environment (inherited by every child from now on)."""
    os.environ[MARK] = uuid.uuid4().hex
    return os.environ[MARK]


def interrupt_on_sigterm() -> None:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` in the main thread, as SIGINT does."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)


def environ_of(pid: int) -> dict[str, str]:
    """A process's environment as it started ({} for one gone or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(
        item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item
    )


def command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def carrying(name: str, value: str) -> dict[int, str]:
    """pid -> command line of every live process but this one whose environment has
    ``name=value`` (zombies, which hold nothing but a table entry, are left out)."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        if environ_of(pid).get(name) != value:
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out[pid] = command_of(pid)
    return out


def wait_gone(probe: str, timeout_s: float = 30.0) -> dict[int, str]:
    """The processes still carrying ``PROBE=probe`` once they are all gone or the time is up
    ({} when none is left)."""
    deadline = time.monotonic() + timeout_s
    while (left := carrying(PROBE, probe)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def reap(mark: str | None = None, grace_s: float = 10.0) -> dict[int, str]:
    """Kill every process that still carries this run's mark after ``grace_s`` (a Spark
    session's JVM exits by itself once the Python process that started it has gone, a moment
    later); what was killed (pid -> command line), for the run to say."""
    mark = mark or os.environ.get(MARK)
    if not mark:
        return {}
    deadline = time.monotonic() + grace_s
    while (left := carrying(MARK, mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def say_reaped(left: dict[int, str], who: str) -> None:
    if left:
        print(
            f"\nleft running by {who}, now killed:\n"
            + "\n".join(f"  {pid} {cmd[:200]}" for pid, cmd in left.items()),
            file=sys.stderr,
            flush=True,
        )


def own_run_environ() -> dict[str, str]:
    """This process's environment for a pytest or ``make`` run of its own, started from a test:
    without pytest-xdist's variables, which would make it take itself for a worker of this run
    (it would neither mark nor reap its own processes, tests/conftest.py)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}


@contextmanager
def whole_run(who: str) -> Iterator[None]:
    """A run (``make bench``, one benchmark) that ends with everything it started, however it
    ends: a mark, SIGTERM as Ctrl-C, and a reap at the end. Stopped, it says so in one line
    and exits 130, as a shell does for Ctrl-C (a traceback of where it was is noise)."""
    mark_this_run()
    interrupt_on_sigterm()
    try:
        yield
    except KeyboardInterrupt as stop:
        print(f"{who}: stopped ({stop or 'SIGINT'})", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    finally:
        say_reaped(reap(), who)

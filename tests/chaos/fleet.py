"""The chaos run's workers: fixed slots a fault restarts, an extra one that joins and leaves, a
supervisor that restarts what died unasked, and the RSS of every process over its life.

Memory growth is measured per *incarnation* (one worker process, from its start to its end):
a restarted worker starts small and grows while it recovers its tables, so comparing its RSS
with its predecessor's would measure the restart, not a leak. Each incarnation's ratio is its
last ``VmRSS`` sample ÷ its first sample at least ``warm_up_s`` after it started (recovery,
imports and first fetches are over by then); only incarnations that lived ``min_span_s``
beyond the warm-up are compared, and the run reports the largest ratio among them.

A first incarnation's baseline is taken while the joins' state is still filling its retention
window (100 s of traffic), and the state it then grows into is not a leak. So the run also
reports ``chaos_rss_growth_ratio_filled``: the same ratio with the baseline taken no earlier
than the moment the state spans its whole window (``state_filled``). The goal is set on the
first; the second says how much of it the filling explains.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness import Names, Worker, pyspy


@dataclass
class Incarnation:
    """One worker process: (seconds since its start, VmRSS kB) samples."""

    name: str
    pid: int
    started: float
    samples: list[tuple[float, int]] = field(default_factory=list)

    def ratio(
        self, warm_up_s: float, min_span_s: float, not_before: float | None = None
    ) -> float | None:
        """Last sample ÷ first at least ``warm_up_s`` after the start (and not before the
        monotonic time ``not_before``); None when it lived less than ``min_span_s`` after it."""
        after = [
            kb
            for t, kb in self.samples
            if t >= warm_up_s and (not_before is None or self.started + t >= not_before)
        ]
        if not_before is not None:
            warm_up_s = max(warm_up_s, not_before - self.started)
        last_t = self.samples[-1][0] if self.samples else 0.0
        if not after or last_t < warm_up_s + min_span_s:
            return None
        return after[-1] / after[0]


def vm_rss_kb(pid: int) -> int | None:
    """VmRSS of a live process, from /proc (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class Fleet:
    """``workers`` slots (``w0``...; a restart keeps the slot's data dir and web port, as a pod
    keeps its volume) and at most one extra worker (``x1``, ``x2``...: always a new one)."""

    def __init__(self, names: Names, folder: Path, workers: int, **env: Any) -> None:
        self.names, self.folder, self.env = names, folder, env
        self.slots = [self._new(f"w{i}") for i in range(workers)]
        self.extra: Worker | None = None
        self.extras = 0
        self.lock = threading.RLock()  # faults and the supervisor both start and stop workers
        self.incarnations: list[Incarnation] = []
        self.unasked_exits: list[tuple[str, int | None]] = []
        self._next_target = 0
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def _new(self, name: str) -> Worker:
        return Worker(
            {**self.names.env, **{"ETJ_" + k.upper(): str(v) for k, v in self.env.items()}},
            self.folder,
            name=name,
        )

    @property
    def running(self) -> list[Worker]:
        return [w for w in (*self.slots, self.extra) if w is not None]

    def start(self, w: Worker) -> Worker:
        with self.lock:
            w.start()
            assert w.proc is not None
            self.incarnations.append(Incarnation(w.name, w.proc.pid, time.monotonic()))
            return w

    def start_all(self, timeout_s: float = 180) -> None:
        for w in self.slots:
            self.start(w)
        for w in self.slots:
            w.wait_ready(timeout_s=timeout_s)

    def target(self) -> Worker:
        """The next slot a worker fault hits, last slot first: in a short run the first slot
        is hit last, so one process lives long enough for its memory to be compared."""
        w = self.slots[-1 - self._next_target % len(self.slots)]
        self._next_target += 1
        return w

    # --- the worker faults --------------------------------------------------------------------

    def kill_and_restart(self) -> str:
        with self.lock:
            w = self.target()
            w.kill()
            self.start(w)
        return w.name

    def graceful_restart(self) -> str:
        with self.lock:
            w = self.target()
            code = w.stop()
            self.start(w)
        return f"{w.name} (exit {code})"

    def join_or_leave(self) -> str:
        """A new worker joins; the next time, it leaves (SIGTERM)."""
        with self.lock:
            if self.extra is None:
                self.extras += 1
                self.extra = self.start(self._new(f"x{self.extras}"))
                return f"{self.extra.name} joins"
            gone, self.extra = self.extra, None
            code = gone.stop()
            return f"{gone.name} leaves (exit {code})"

    # --- supervisor and memory ------------------------------------------------------------------

    def supervise(self) -> None:
        """Start again any worker that exited without a fault asking (as Kubernetes would)."""
        with self.lock:
            for w in self.running:
                if w.proc is not None and w.proc.poll() is not None:
                    self.unasked_exits.append((w.name, w.proc.returncode))
                    self.start(w)

    def sample_rss(self) -> None:
        now = time.monotonic()
        with self.lock:
            live = {
                w.proc.pid for w in self.running if w.proc is not None and w.proc.poll() is None
            }
        for inc in self.incarnations:
            if inc.pid in live:
                kb = vm_rss_kb(inc.pid)
                if kb:  # 0 while the process is still being exec'ed
                    inc.samples.append((now - inc.started, kb))

    def rss(
        self, warm_up_s: float, min_span_s: float, state_filled: float | None = None
    ) -> dict[str, Any]:
        """The largest growth ratio (module docstring); with ``state_filled`` (the monotonic
        time from which the joins' state spans its whole retention window) also the largest
        counted from then on, ``chaos_rss_growth_ratio_filled``: growth that the state filling
        its window does not explain."""
        each = []
        for inc in self.incarnations:
            r = inc.ratio(warm_up_s, min_span_s)
            f = None if state_filled is None else inc.ratio(warm_up_s, min_span_s, state_filled)
            if inc.samples:
                each.append(
                    {
                        "name": inc.name,
                        "pid": inc.pid,
                        "ratio": r and round(r, 3),
                        "ratio_filled": f and round(f, 3),
                        "lived_s": round(inc.samples[-1][0]),
                        "first_mb": round(inc.samples[0][1] / 1024),
                        "max_mb": round(max(kb for _, kb in inc.samples) / 1024),
                        "last_mb": round(inc.samples[-1][1] / 1024),
                    }
                )
        ratios = [e["ratio"] for e in each if e["ratio"] is not None]
        filled = [e["ratio_filled"] for e in each if e["ratio_filled"] is not None]
        return {
            "chaos_rss_growth_ratio": max(ratios) if ratios else None,
            "rss_compared": len(ratios),
            "chaos_rss_growth_ratio_filled": max(filled) if filled else None,
            "rss_compared_filled": len(filled),
            "rss_per_incarnation": each,
        }

    def dump_stacks(self) -> list[Path]:
        """Every running worker's threads, as py-spy sees them now (``<name>.stacks.txt``
        beside its log): where a worker that stopped answering is stuck. Needs py-spy (the
        bench extra); skipped without it."""
        try:
            exe = pyspy()
        except RuntimeError:
            return []
        written = []
        for w in self.running:
            if w.proc is None or w.proc.poll() is not None:
                continue
            out = self.folder / f"{w.name}.stacks.txt"
            done = subprocess.run(
                [exe, "dump", "--pid", str(w.proc.pid), "--locals"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            out.write_text(done.stdout + done.stderr)
            print(f"[chaos] {w.name}'s stacks: {out}", flush=True)
            written.append(out)
        return written

    def watch(self, every_s: float = 2.0) -> None:
        """In a thread until :meth:`stop_all`: supervise, and sample every process's RSS."""

        def loop() -> None:
            while not self._stop.wait(every_s):
                self.supervise()
                self.sample_rss()

        self._watcher = threading.Thread(target=loop, name="chaos-fleet", daemon=True)
        self._watcher.start()

    def stop_all(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        with self.lock:
            for w in self.running:
                w.kill()

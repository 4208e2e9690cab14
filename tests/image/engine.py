"""A real Docker engine for the image tier: installed when absent, started when none runs.

No Docker engine runs on these machines and no container registry is reachable. Debian's
``docker.io`` (dockerd 20.10, overlay2, cgroup v1) installs and starts as it is, and
``debootstrap`` makes the base image (:mod:`tests.image.base_image`). Both are installed here,
as ``make test`` installs chromium, so the tier runs on CI's fresh machine; a daemon that cannot
start fails the tier with the daemon's own log, never a skip.

What this module starts (dockerd) it stops, by PID; a daemon that was already running is used
and left running. Its data root is Docker's default, ``/var/lib/docker``: images (the base, the
build cache) outlive the daemon, so the next run on this machine builds nothing that did not
change.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.apt import AptError, install

#: Debian's packages: the engine and the base image's builder
PACKAGES = {"dockerd": "docker.io", "debootstrap": "debootstrap"}
PIDFILE = Path("/var/run/docker.pid")
#: every container and volume the tier makes carries this label (leftovers of a killed run
#: are recognised and removed)
LABEL = "etj-test"


class EngineError(RuntimeError):
    """The engine could not be installed or started; the message carries its own words."""


def _which(tool: str) -> str | None:
    # /usr/sbin is not on every root PATH (CI's environment is the machine's)
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")


def install_missing() -> list[str]:
    """``apt-get install`` docker.io and debootstrap where absent; the packages installed."""
    missing = [pkg for tool, pkg in PACKAGES.items() if _which(tool) is None]
    if not missing:
        return []
    try:
        install(missing)
    except AptError as exc:
        raise EngineError(str(exc)) from None
    return missing


class Engine:
    """The Docker daemon the tier talks to, and the client that talks to it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None  # dockerd, when started here

    @property
    def client(self) -> str:
        """The client of the same package as the daemon: another ``docker`` may come first on
        PATH (a newer client builds with another context checksum: every cached step missed
        once when the two took turns). Looked up at each use: it may be installed meanwhile."""
        return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"

    @property
    def log_path(self) -> Path:
        return self.workdir / "dockerd.log"

    def run(
        self, *args: str, check: bool = True, timeout: float = 120, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``docker ARGS``; a failure raises with the client's own words."""
        done = subprocess.run(
            [self.client, *args], capture_output=True, timeout=timeout, input=input
        )
        out = subprocess.CompletedProcess(
            done.args,
            done.returncode,
            done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"),
        )
        if check and out.returncode != 0:
            raise EngineError(
                f"docker {' '.join(args)[:300]} -> {out.returncode}:\n"
                f"{out.stderr[-3000:]}{out.stdout[-2000:]}"
            )
        return out

    def inspect(self, *names: str, kind: str = "") -> list[dict[str, Any]]:
        args = [kind, "inspect"] if kind else ["inspect"]
        return json.loads(self.run(*args, *names).stdout)

    def answers(self) -> bool:
        try:
            return (
                self.run(
                    "version", "--format", "{{.Server.Version}}", check=False, timeout=20
                ).returncode
                == 0
            )
        except subprocess.TimeoutExpired:
            return False

    def start(self, timeout_s: float = 60.0) -> Engine:
        """Use the running daemon, else start one (installing the packages first if absent)."""
        install_missing()
        if self.answers():
            return self
        return self.launch(timeout_s)

    def launch(self, timeout_s: float = 60.0) -> Engine:
        """Start dockerd; it failing to answer raises :class:`EngineError` with its log."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [_which("dockerd") or "dockerd"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(f"dockerd exited {self.proc.returncode}:\n{self.log()[-4000:]}")
            if self._ours() and self.answers():
                return self
            time.sleep(0.3)
        self.stop()
        raise EngineError(f"dockerd did not answer in {timeout_s:.0f} s:\n{self.log()[-4000:]}")

    def _ours(self) -> bool:
        """The daemon's pid file names the dockerd started here (not another one's socket)."""
        try:
            return self.proc is not None and int(PIDFILE.read_text()) == self.proc.pid
        except (OSError, ValueError):
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def remove_leftovers(self) -> None:
        """Containers and volumes of an earlier run that was killed before it cleaned up
        (stopped containers only: a running one may be another session's)."""
        stale = self.run(
            "ps", "-aq", "--filter", f"label={LABEL}", "--filter", "status=exited", check=False
        ).stdout.split()
        if stale:
            self.run("rm", "-f", *stale, check=False)
        self.run("volume", "prune", "-f", "--filter", f"label={LABEL}", check=False)

    def stop(self) -> None:
        """Stop dockerd if this module started it: SIGTERM to dockerd alone (it stops the
        containerd it started), SIGKILL to both after 30 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

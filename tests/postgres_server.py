"""A real PostgreSQL server for the sink's tests: installed when absent, started per test.

Debian's ``postgresql`` package (as the image tier installs ``docker.io``: installed with
apt-get on a fresh CI machine, found in ``/usr/lib/postgresql/<version>/bin`` here). Each server
is a throwaway cluster in a temporary directory on a free port, trust authentication on
127.0.0.1 only; it is stopped by its PID and its directory removed. As root (CI, these
machines) the server runs as Debian's ``postgres`` user, which the package creates: PostgreSQL
refuses to run as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from app.dev.local_broker import free_port
from tests.apt import AptError, install

PACKAGE = "postgresql"
BIN_ROOT = Path("/usr/lib/postgresql")


class PostgresError(RuntimeError):
    """The server could not be installed or started; the message carries its own words."""


def bin_dir() -> Path | None:
    """The newest installed server's bin directory, or None."""
    found = sorted(
        BIN_ROOT.glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def install_missing() -> Path:
    """The server's bin directory, ``apt-get install postgresql`` first when there is none."""
    found = bin_dir()
    if found is not None:
        return found
    try:
        install([PACKAGE], "--no-install-recommends")
    except AptError as exc:
        raise PostgresError(str(exc)) from None
    found = bin_dir()
    if found is None:
        raise PostgresError(f"{PACKAGE} installed, but no server under {BIN_ROOT}")
    return found


class PostgresServer:
    """One throwaway cluster: :meth:`start`, :attr:`dsn`, :meth:`stop`."""

    def __init__(self) -> None:
        self.bin = install_missing()
        self.dir = Path(tempfile.mkdtemp(prefix="etj-pg-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses root: Debian's postgres user runs it
            self.as_user = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
            shutil.chown(self.dir, "postgres", "postgres")

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    @property
    def log_path(self) -> Path:
        return self.dir / "postgres.log"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def start(self, timeout_s: float = 60.0) -> PostgresServer:
        data = self.dir / "data"
        done = subprocess.run(
            [
                *self.as_user,
                str(self.bin / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise PostgresError(f"initdb failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *self.as_user,
                    str(self.bin / "postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.dir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=50",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PostgresError(
                    f"postgres exited ({self.proc.returncode}):\n{self.log()[-3000:]}"
                )
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                return self
            time.sleep(0.2)
        self.stop()
        raise PostgresError(f"postgres not ready after {timeout_s} s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL of its process group if it lingers; dir removed."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)

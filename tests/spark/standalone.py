"""A Spark standalone cluster on 127.0.0.1 from the pyspark install: one master, N workers.

The same programs a real standalone cluster runs (``spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each a separate JVM with its
own ports, work directory and log; jobs reach it only through ``spark-submit --master
spark://127.0.0.1:PORT``. Every process is started in its own process group and killed by that
id at the end (a worker's executors are its children, in its group), also when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent  # bin/spark-class, bin/spark-submit, jars/


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_env(folder: Path) -> dict[str, str]:
    """Loopback only, this interpreter for Python, logs and scratch space under ``folder``."""
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(folder / "local"), "SPARK_LOG_DIR": str(folder / "logs"),
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_NO_DAEMONIZE": "1"}


@dataclass
class StandaloneCluster:
    folder: Path
    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    master_url: str = ""
    ui_url: str = ""

    def _start(self, name: str, args: Sequence[str]) -> None:
        log = (self.folder / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args], env=spark_env(self.folder),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.folder)

    def start(self, timeout_s: float = 60.0) -> "StandaloneCluster":
        self.folder.mkdir(parents=True, exist_ok=True)
        port, ui = free_port(), free_port()
        self.master_url, self.ui_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}"
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)])
        for i in range(self.workers):
            work = self.folder / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self._start(f"worker-{i}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--port", str(free_port()), "--webui-port", str(free_port()),
                "--cores", str(self.cores_per_worker), "--memory", self.memory_per_worker,
                "--work-dir", str(work), self.master_url])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode}\n{self.logs()}")
            state = self.state()
            if state and state.get("aliveworkers", 0) >= self.workers:
                return self
            time.sleep(0.5)
        raise TimeoutError(f"the cluster did not get {self.workers} workers\n{self.logs()}")

    def state(self) -> dict[str, Any] | None:
        """The master's own view (its web UI's JSON): workers, applications, their states."""
        try:
            with urllib.request.urlopen(self.ui_url + "/json/", timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def submit(self, args: Sequence[str], conf: dict[str, str] | None = None,
               timeout_s: float = 180.0, env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str]:
        """``spark-submit --master spark://... app/batch/__main__.py ARGS`` (client mode);
        ``env``: more variables for the driver (the bootstrap job's ``ETJ_*`` settings)."""
        root = Path(__file__).resolve().parents[2]
        settings = {"spark.executor.memory": "512m", "spark.executor.cores": "1",
                    "spark.cores.max": str(self.workers * self.cores_per_worker),
                    "spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false",
                    "spark.driver.host": "127.0.0.1", **(conf or {})}
        cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", self.master_url,
               "--deploy-mode", "client"]  # the app name is the job's (etj-reconcile, ...)
        for k, v in settings.items():
            cmd += ["--conf", f"{k}={v}"]
        env = {**spark_env(self.folder), **(env or {}),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(root),
                                                           os.environ.get("PYTHONPATH")]))}
        return subprocess.run([*cmd, str(root / "app" / "batch" / "__main__.py"), *args],
                              env=env, cwd=root, capture_output=True, text=True,
                              timeout=timeout_s)

    def executor_logs(self) -> list[Path]:
        return sorted(self.folder.glob("worker-*/app-*/*/std*"))

    def logs(self, tail: int = 4000) -> str:
        parts = []
        for path in [*sorted(self.folder.glob("*.log")), *self.executor_logs()]:
            text = path.read_text(errors="replace")
            parts.append(f"===== {path.relative_to(self.folder)} (last {tail} chars) =====\n"
                         f"{text[-tail:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """SIGTERM each process group (by its leader's PID), then SIGKILL what is left."""
        for p in self.procs.values():
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(p.pid, signal.SIGKILL)
            p.wait()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # start_new_session: the group id is the leader's PID
    except ProcessLookupError:
        pass

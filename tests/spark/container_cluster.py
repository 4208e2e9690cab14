"""A Spark standalone cluster of machines of its own: a master and N workers, each a container
of the node image (:mod:`tests.spark.node_image`: Java 17, Python 3.11, Spark; nothing of etj),
on the real Docker engine of the image tier (:mod:`tests.image.engine`).

What each node has of its own: its root filesystem (the image's), its hostname
(``etj-spark-master``, ``etj-spark-worker-1``, ...), its processes, and its address. What they
share with the driver, which runs on this host (client mode):

- **the network**: ``--network host``, as the image tier runs its containers, so the test broker
  on 127.0.0.1 and the driver are reachable from every executor with nothing in between. Each
  node gets its own loopback address (``127.77.N.1`` the master, ``.2``, ``.3`` ... the workers;
  every 127.x address is the host's loopback) and binds only it (``SPARK_LOCAL_IP``, ``--host``):
  nodes are told apart by address as on a real network, their ports cannot collide, and no
  traffic leaves the loopback. The nodes' names resolve on the nodes (``--add-host``); the
  driver, on the host, reaches them by address.
- **one folder**, bind-mounted at the same path in every container (the test session's
  temporary folder): the archives the executors read, the outputs they write, the ``file://``
  snapshot store, as HDFS, S3 or an NFS volume would be on a real cluster.

Each worker's work folder (executor logs, the unpacked ``--archives``) is a folder of its own,
bind-mounted from the host so that a failed test can print the executors' logs. Every container
carries the tier's label (leftovers of a killed run are removed by :meth:`Engine
.remove_leftovers`) and this run's mark (tests/leftovers.py reaps its processes); all are
removed by :meth:`ContainerCluster.stop`, also when a test fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

from tests import leftovers
from tests.image.engine import LABEL, Engine

#: the driver's Spark launcher (spark-submit)
SPARK_HOME = Path(pyspark.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]
#: where a worker keeps its executors' folders, inside its container
WORK = "/opt/spark-work"
#: what a user's shell may hold that must not decide for the driver here: the job's options do
DRIVER_ENV_DROPPED = (
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "SPARK_LOCAL_IP",
    "SPARK_LOCAL_HOSTNAME",
    "PYSPARK_SUBMIT_ARGS",
    "SPARK_CONF_DIR",
)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _block() -> str:
    """``127.77.N``: this run's addresses (another run on the machine most likely has another
    N; the ports are chosen free anyway)."""
    return f"127.77.{20 + os.getpid() % 200}"


@dataclass
class Node:
    role: str  # master, worker-1, ...
    hostname: str
    ip: str
    container: str
    cid: str = ""


@dataclass
class ContainerCluster:
    engine: Engine
    image: str
    shared: Path  # bind-mounted at the same path in every container
    folder: Path  # logs and the workers' work folders
    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    nodes: list[Node] = field(default_factory=list)
    master_url: str = ""
    ui_url: str = ""
    started_s: float = 0.0

    def _run(self, node: Node, args: Sequence[str], mounts: dict[Path, str]) -> None:
        hosts = [f"--add-host={n.hostname}:{n.ip}" for n in self.nodes]
        volumes = [f"-v{src}:{dst}" for src, dst in mounts.items()]
        env = {
            "SPARK_LOCAL_IP": node.ip,
            "SPARK_LOCAL_HOSTNAME": node.ip,
            "SPARK_DAEMON_MEMORY": "256m",
            leftovers.MARK: os.environ.get(leftovers.MARK, ""),
        }
        node.cid = self.engine.run(
            "run",
            "-d",
            "--name",
            node.container,
            "--hostname",
            node.hostname,
            "--label",
            f"{LABEL}=1",
            "--network",
            "host",
            *hosts,
            *volumes,
            *[f"-e{k}={v}" for k, v in env.items()],
            self.image,
            "spark-class",
            *args,
        ).stdout.strip()

    def start(self, timeout_s: float = 90.0) -> ContainerCluster:
        t0 = time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        block, tag = _block(), f"{os.getpid()}-{int(time.time() * 1000) % 10**8}"
        self.nodes = [Node("master", "etj-spark-master", f"{block}.1", f"etj-spark-{tag}-master")]
        self.nodes += [
            Node(
                f"worker-{i}",
                f"etj-spark-worker-{i}",
                f"{block}.{i + 1}",
                f"etj-spark-{tag}-worker-{i}",
            )
            for i in range(1, self.workers + 1)
        ]
        master = self.nodes[0]
        port, ui = free_port(master.ip), free_port("")
        self.master_url, self.ui_url = f"spark://{master.ip}:{port}", f"http://{master.ip}:{ui}"
        shared = {self.shared: str(self.shared)}
        try:
            self._run(
                master,
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    master.ip,
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                shared,
            )
            for node in self.nodes[1:]:
                work = self.folder / node.role
                work.mkdir(exist_ok=True)
                self._run(
                    node,
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        node.ip,
                        "--port",
                        str(free_port(node.ip)),
                        "--webui-port",
                        str(free_port("")),
                        "--cores",
                        str(self.cores_per_worker),
                        "--memory",
                        self.memory_per_worker,
                        "--work-dir",
                        WORK,
                        self.master_url,
                    ],
                    {**shared, work: WORK},
                )
            self._wait(timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0
        return self

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node in self.nodes:
                state = self.engine.run(
                    "inspect", "--format", "{{.State.Running}}", node.cid, check=False
                ).stdout.strip()
                if state != "true":
                    raise RuntimeError(f"{node.role} exited\n{self.logs()}")
            state = self.state()
            if state and state.get("aliveworkers", 0) >= self.workers:
                return
            time.sleep(0.5)
        raise TimeoutError(f"the cluster did not get {self.workers} workers\n{self.logs()}")

    def state(self) -> dict[str, Any] | None:
        """The master's own view (its web UI's JSON): workers, applications, their states."""
        try:
            with urllib.request.urlopen(self.ui_url + "/json/", timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def apps(self) -> list[dict[str, Any]]:
        """The applications the master ran (running ones included)."""
        s = self.state() or {}
        return [*s.get("activeapps", []), *s.get("completedapps", [])]

    def driver_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """A user's environment on the driver's machine: this project's Python on the PATH
        (its ``python``, ``spark-submit``), nothing that picks the executors' Python or
        addresses (:data:`DRIVER_ENV_DROPPED`)."""
        env = {k: v for k, v in os.environ.items() if k not in DRIVER_ENV_DROPPED}
        bin_dir = str(Path(sys.executable).parent)
        return {
            **env,
            "SPARK_HOME": str(SPARK_HOME),
            "PATH": os.pathsep.join([bin_dir, str(SPARK_HOME / "bin"), env["PATH"]]),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
            **(extra or {}),
        }

    def submit_args(
        self, conf: dict[str, str] | None = None, archives: Sequence[str] = ()
    ) -> list[str]:
        """``spark-submit --master spark://... --deploy-mode client ...`` up to the script:
        small executors, the driver reachable by the executors at 127.0.0.1 (their loopback is
        the host's) and started with this Python."""
        settings = {
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.workers * self.cores_per_worker),
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.pyspark.driver.python": sys.executable,
            # short jobs: C1 only and a serial GC (~20% less wall time, tests/spark)
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            **(conf or {}),
        }
        cmd = [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master",
            self.master_url,
            "--deploy-mode",
            "client",
        ]
        if archives:
            cmd += ["--archives", ",".join(archives)]
        for k, v in settings.items():
            cmd += ["--conf", f"{k}={v}"]
        return cmd

    def submit(
        self,
        args: Sequence[str],
        conf: dict[str, str] | None = None,
        archives: Sequence[str] = (),
        env: dict[str, str] | None = None,
        timeout_s: float = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        """``spark-submit ... app/batch/__main__.py ARGS`` from this host (client mode);
        ``env``: more variables for the driver (the bootstrap job's ``ETJ_*`` settings)."""
        cmd = [
            *self.submit_args(conf, archives),
            str(ROOT / "app" / "batch" / "__main__.py"),
            *args,
        ]
        return subprocess.run(
            cmd,
            env=self.driver_env(env),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def executor_logs(self) -> list[Path]:
        return sorted(self.folder.glob("worker-*/app-*/*/std*"))

    def executor_hosts(self, app_name: str) -> set[str]:
        """The workers (hostnames) whose executors ran ``app_name``'s tasks: each executor's
        folder is ``app-ID/EXECUTOR``, under its worker's folder."""
        ids = {a["id"] for a in self.apps() if a["name"] == app_name}
        by_role = {n.role: n.hostname for n in self.nodes}
        return {
            by_role[p.parts[-3]] for p in self.folder.glob("worker-*/app-*/*") if p.parts[-2] in ids
        }

    def logs(self, tail: int = 4000) -> str:
        parts = []
        for node in self.nodes:
            if node.cid:
                done = self.engine.run("logs", "--tail", "200", node.cid, check=False)
                text = done.stdout + done.stderr
                parts.append(
                    f"===== {node.role} ({node.hostname}, {node.ip}) "
                    f"(last {tail} chars) =====\n{text[-tail:]}"
                )
        for path in self.executor_logs():
            text = path.read_text(errors="replace")
            parts.append(
                f"===== executor {path.relative_to(self.folder)} (last {tail} chars) "
                f"=====\n{text[-tail:]}"
            )
        return "\n".join(parts)

    def stop(self) -> None:
        """Remove every container (``docker rm -f``: SIGKILL; nothing of a node is kept)."""
        cids = [n.cid or n.container for n in self.nodes]
        if cids:
            self.engine.run("rm", "-f", *cids, check=False, timeout=120)

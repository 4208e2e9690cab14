"""Worker containers of the built image, run as the chart's StatefulSet runs its pods.

A :class:`Container` is a :class:`tests.harness.Worker` whose process is a container: the same
views (``get``), log checks (``wait_ready``, ``assigned``) and fault helpers (tests/faults.py)
work on it. Its ``docker run`` comes from a :class:`tests.image.pod.PodSpec`: the chart's
command and args, read-only root filesystem, a tmpfs at the chart's ``/tmp``, all capabilities
dropped, no privilege escalation, the chart's memory limit and grace period, and a named volume
(its "claim") at the datadir. The user is the image's own (the tier checks it is the chart's).

A volume outlives its containers, as a PersistentVolumeClaim outlives its pods: a container
restarted "on the same volume" is a new container given the old one's volume and pod name.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import Names, Worker
from tests.image.engine import LABEL, Engine
from tests.image.pod import PodSpec, chart_values, pod_spec

#: the chart's `snapshots.credentialsSecret`, as the test's "cluster" holds it
S3_SECRET = "etj-s3"


def docker_memory(quantity: str) -> str:
    """A Kubernetes memory quantity (``1Gi``, ``512Mi``) in Docker's terms (``1g``, ``512m``)."""
    m = re.fullmatch(r"(\d+)([KMG])i", quantity)
    assert m, f"memory quantity the tier does not translate: {quantity}"
    return m.group(1) + m.group(2).lower()


#: how many pods of the StatefulSet a container can reach by their DNS names
PODS = 4


def pod_hosts(web_host: str) -> list[str]:
    """The stable DNS names of the StatefulSet's pods (``etj-0.etj-headless.ns.svc...``, from
    the pod's own): each container maps them to 127.0.0.1, where every pod's web server
    listens (host network), so a view forwards to the key's owner as the headless Service
    lets it in a cluster."""
    pod, _, domain = web_host.partition(".")
    base = pod.rsplit("-", 1)[0]
    return [f"{base}-{i}.{domain}" for i in range(PODS)]


def run_args(
    spec: PodSpec, image: str, name: str, volume: str, web_port: int, env: dict[str, str]
) -> list[str]:
    """``docker run`` arguments of one pod of the StatefulSet (networking: see tests.image.pod)."""
    args = [
        "run",
        "-d",
        "--name",
        name,
        "--label",
        f"{LABEL}=1",
        "--network",
        "host",
        *[f"--add-host={host}:127.0.0.1" for host in pod_hosts(spec.web_host)],
        "--tmpfs",
        f"{spec.tmp}:rw,size={docker_memory(spec.tmp_size)}",
        "--memory",
        docker_memory(spec.memory_limit),
        "--stop-timeout",
        str(spec.grace_s),
        "-v",
        f"{volume}:{spec.datadir}",
    ]
    if spec.read_only_root:
        args.append("--read-only")
    args += [f"--cap-drop={cap}" for cap in spec.drop_capabilities]
    if spec.no_new_privileges:
        args += ["--security-opt", "no-new-privileges"]
    for key, value in {**spec.env, **env, "ETJ_WEB_PORT": str(web_port)}.items():
        args += ["-e", f"{key}={value}"]
    return args + ["--entrypoint", spec.command[0], image, *spec.command[1:], *spec.args]


def tool_args(spec: PodSpec, image: str, *command: str) -> list[str]:
    """``docker run`` arguments of one of the image's other tools (``sample-traffic``, ...):
    the image's own entrypoint, the pod's environment and lock-down, removed when it ends."""
    args = [
        "run",
        "--rm",
        "--label",
        f"{LABEL}=1",
        "--network",
        "host",
        "--tmpfs",
        f"{spec.tmp}:rw,size={docker_memory(spec.tmp_size)}",
        "--read-only",
        *[f"--cap-drop={cap}" for cap in spec.drop_capabilities],
        "--security-opt",
        "no-new-privileges",
    ]
    for key, value in spec.env.items():
        args += ["-e", f"{key}={value}"]
    return args + [image, *command]


@dataclass(kw_only=True)
class Container(Worker):
    """One worker container (``name`` is the container's; ``pod`` the StatefulSet pod it
    plays, which gives its DNS name)."""

    engine: Engine
    image: str
    spec: PodSpec
    volume: str
    pod: str = "etj-0"
    cid: str | None = None
    started_at: float = 0.0  # time.monotonic() at `docker run`
    follower: subprocess.Popen[bytes] | None = None

    def start(self) -> Container:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = run_args(self.spec, self.image, self.name, self.volume, self.web_port, self.env)
        self.started_at = time.monotonic()
        self.cid = self.engine.run(*args).stdout.strip()
        with self.log_path.open("ab") as log:  # the container's output, kept after it is gone
            self.follower = subprocess.Popen(
                [self.engine.client, "logs", "-f", self.cid], stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def state(self) -> dict[str, Any]:
        assert self.cid is not None
        return json.loads(
            self.engine.run("inspect", "--format", "{{json .State}}", self.cid).stdout
        )

    def running(self) -> bool:
        return bool(self.state()["Running"])

    def _check_running(self) -> None:
        state = self.state()
        if not state["Running"]:
            raise RuntimeError(
                f"container {self.name} exited {state['ExitCode']} "
                f"({state.get('Error') or 'no error'}):\n" + self.log()[-4000:]
            )

    def wait_ready(self, timeout_s: float = 90.0, count: int = 1) -> Container:
        """Wait for the ``count``-th "Worker ready" in the container's log."""
        deadline = time.monotonic() + timeout_s
        checked = 0.0
        while time.monotonic() < deadline:
            if self.ready_count() >= count:
                return self
            if time.monotonic() - checked > 2:
                self._check_running()
                checked = time.monotonic()
            time.sleep(0.3)
        raise TimeoutError(
            f"container {self.name} not ready in {timeout_s}s:\n" + self.log()[-4000:]
        )

    def wait_http_ready(self, timeout_s: float = 90.0) -> float:
        """Wait until the readiness probe's path answers 200; seconds since ``docker run``."""
        path = self.spec.probes["readinessProbe"]
        deadline = time.monotonic() + timeout_s
        checked = 0.0
        while time.monotonic() < deadline:
            if self.get(path, timeout_s=2.0)[0] == 200:
                return time.monotonic() - self.started_at
            if time.monotonic() - checked > 2:
                self._check_running()
                checked = time.monotonic()
            time.sleep(0.05)
        raise TimeoutError(
            f"container {self.name}: {path} not 200 in {timeout_s}s:\n" + self.log()[-4000:]
        )

    def health(self) -> str:
        """What the image's own HEALTHCHECK reports: starting, healthy or unhealthy."""
        return str((self.state().get("Health") or {}).get("Status", "none"))

    def wait_healthy(self, timeout_s: float = 120.0) -> float:
        """Wait for Docker to call the container healthy; seconds since ``docker run``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.health()
            if status == "healthy":
                return time.monotonic() - self.started_at
            assert status == "starting", (status, self.state().get("Health"))
            time.sleep(1)
        raise TimeoutError(
            f"container {self.name} still {self.health()} after {timeout_s}s: "
            f"{self.state().get('Health')}"
        )

    def kill(self) -> int | None:
        """``docker kill``: SIGKILL, no flush, no commit, no goodbye; the exit code (137)."""
        if self.cid is None or not self.running():
            return None if self.cid is None else int(self.state()["ExitCode"])
        self.engine.run("kill", self.cid)
        return self.wait_exit()

    def stop(self, timeout_s: float | None = None) -> int | None:
        """``docker stop``: SIGTERM, then SIGKILL after the chart's grace period; exit code."""
        if self.cid is None:
            return None
        grace = self.spec.grace_s if timeout_s is None else timeout_s
        self.engine.run("stop", "-t", str(int(grace)), self.cid, timeout=grace + 60)
        return self.wait_exit()

    def wait_exit(self, timeout_s: float = 60.0) -> int:
        assert self.cid is not None
        code = int(self.engine.run("wait", self.cid, timeout=timeout_s).stdout.strip())
        if self.follower is not None:
            self.follower.wait(timeout=10)
        return code

    def remove(self) -> None:
        if self.cid is not None:
            self.engine.run("rm", "-f", self.cid, check=False)
        if self.follower is not None and self.follower.poll() is None:
            self.follower.kill()
            self.follower.wait()


def volume_path(engine: Engine, volume: str) -> Path:
    """Where a named volume lives on this host (the daemon is local; the tests run as root)."""
    (info,) = engine.inspect(volume, kind="volume")
    return Path(info["Mountpoint"])


def new_volume(engine: Engine, name: str) -> str:
    engine.run("volume", "create", "--label", f"{LABEL}=1", name)
    return name


def spec_for(
    env: dict[str, str],
    s3: dict[str, str] | None,
    pod: str,
    **values: Any,
) -> PodSpec:
    """The chart's pod ``pod`` given this test's settings ``env`` as chart values (and
    snapshots in ``s3``, if given)."""
    extra: dict[str, Any] = dict(values)
    secrets = {}
    if s3 is not None:
        extra["snapshots"] = {
            "credentialsSecret": S3_SECRET,
            "endpointUrl": s3["endpoint"],
            "region": "us-east-1",
        }
        secrets[S3_SECRET] = {k: v for k, v in s3.items() if k.startswith("AWS_")}
    return pod_spec(chart_values(env, **extra), pod_name=pod, secrets=secrets)


#: the chart's static membership is for Kafka: tansu never answers a static member that comes
#: back with other JoinGroup metadata, and a Faust worker's is never the same after a restart
#: (its last assignment is in it), so a restarted pod waited for its partitions for good
#: (docs/contributing/tests.md#the-test-broker): the tier's pods are dynamic members, with
#: the session timeout the chart had before static membership (tansu holds every JoinGroup
#: for half of it)
TANSU_VALUES: dict[str, Any] = {"staticMembership": {"enabled": False}}
TANSU_SETTINGS: dict[str, Any] = {"session_timeout_s": 10}


def start_container(
    engine: Engine,
    image: str,
    names: Names,
    pod: str,
    workdir: Path,
    volume: str,
    s3: dict[str, str] | None = None,
    n: int = 0,
    web_port: int | None = None,
    values: dict[str, Any] | None = None,
    **settings: Any,
) -> Container:
    """Start the ``n``-th container playing ``pod`` (the tier's ``containers`` fixture and
    ``bench.image_start``): the test's names and ``settings`` (``session_timeout_s=4`` ->
    ``ETJ_SESSION_TIMEOUT_S``) reach it as chart values, and ``values``, other chart values.
    ``web_port``: the port of an earlier container of the pod (a pod keeps its port), else a
    free one."""
    # the bundled broker holds a fetch for its whole wait (docs/operating/settings.md): its
    # documented local value, as on Kafka, which answers a fetch as soon as it can
    settings = {"consumer_fetch_max_wait_ms": 100, **TANSU_SETTINGS, **settings}
    values = {**TANSU_VALUES, **(values or {})}
    env = {**names.env, **{"ETJ_" + k.upper(): str(v) for k, v in settings.items()}}
    c = Container(
        env={},
        workdir=workdir,
        name=f"{names.prefix}-{pod}-{n}",
        engine=engine,
        image=image,
        spec=spec_for(env, s3, pod, **values),
        volume=volume,
        pod=pod,
        **({} if web_port is None else {"web_port": web_port}),
    )
    return c.start()

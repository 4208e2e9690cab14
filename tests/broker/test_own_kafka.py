"""Your own Kafka, TLS included: ``ETJ_BOOTSTRAP`` plus the ``ETJ_KAFKA_*`` settings point
``make run`` and the test suite at it (docs/getting-started.md#your-own-kafka).

A TLS-only broker stands in for "your Kafka": tests/tls_proxy.py's proxy requires a client
certificate and forwards to a tansu of its own that advertises the proxy, so a client that
does not speak TLS with the right certificate gets nothing. The proxy counts the connections
that came through it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.dev.local_broker import LocalBroker, free_port
from app.kafka.security import KafkaSecurityError
from tests.broker.test_run_local import CORRECTION, JOINED, make_run, wait_for_a_correction
from tests.broker.test_tls import certs, tls_broker, tls_env  # noqa: F401  (module fixtures)
from tests.harness import SECURITY_PREFIX, make_names
from tests.leftovers import own_run_environ
from tests.tls_proxy import Certs, TlsBroker

ROOT = Path(__file__).resolve().parents[2]


def own_kafka_env(
    broker: TlsBroker, certs: Certs, tmp: Path, ca: Path | None = None
) -> dict[str, str]:
    """What a person sets to use their Kafka: the bootstrap server and the TLS settings (the
    same files as test_tls.py's worker gets)."""
    tls = {"ETJ_" + k.upper(): v for k, v in tls_env(certs, tmp, ca).items()}
    return {"ETJ_BOOTSTRAP": f"127.0.0.1:{broker.proxy.port}", **tls}


def clean_environ() -> dict[str, str]:
    """This process's environment for a run of its own, without another broker's settings."""
    return {
        k: v
        for k, v in own_run_environ().items()
        if not k.startswith(SECURITY_PREFIX) and k not in ("ETJ_BOOTSTRAP", "ETJ_BROKER_URL")
    }


def session_processes(pid: int) -> str:
    return subprocess.run(
        ["ps", "-o", "pid=,args=", "-s", str(pid)], capture_output=True, text=True
    ).stdout


def test_make_run_uses_your_kafka_over_tls_and_starts_no_broker(tls_broker, certs, tmp_path):
    names = make_names(tls_broker.url)  # this test's own topic names on that broker
    port = free_port()
    env = {
        **clean_environ(),
        **names.env,
        **own_kafka_env(tls_broker, certs, tmp_path),
        "ETJ_WEB_PORT": str(port),
        "ETJ_DATADIR": str(tmp_path / "state"),
    }
    del env["ETJ_BROKER_URL"]  # make run takes it from ETJ_BOOTSTRAP
    before = tls_broker.proxy.connections
    with make_run(env, tmp_path) as (proc, out):
        text = wait_for_a_correction(proc, out)
        assert f"broker  kafka://127.0.0.1:{tls_broker.proxy.port} (existing, SSL)" in text, text
        assert JOINED.search(text) and CORRECTION.search(text), text[-3000:]
        running = session_processes(proc.pid)
        assert "tansu" not in running, running  # nothing but the worker and the tools
        # the worker, the traffic and both watchers all came in through TLS
        assert tls_broker.proxy.connections - before >= 4
    assert "stopped." in out.read_text()


def test_the_test_suite_runs_against_your_kafka_over_tls(tls_broker, certs, tmp_path):
    """A broker test in a pytest of its own, pointed at the TLS-only broker: its session broker,
    its workers and its producers and consumers all connect with the TLS settings."""
    before = tls_broker.proxy.connections
    test = (
        "tests/broker/test_broker_mood_join.py::"
        "test_paced_out_of_order_emits_corrections_and_converges"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env={**clean_environ(), **own_kafka_env(tls_broker, certs, tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
    assert tls_broker.proxy.connections - before >= 3  # session wait, worker, test clients


TIMEOUT_S = 30


def test_a_broker_whose_certificate_is_not_trusted_is_said_at_once(
    tls_broker, certs, tmp_path, monkeypatch
):
    for k, v in own_kafka_env(tls_broker, certs, tmp_path, ca=certs.other_ca).items():
        monkeypatch.setenv(k, v)
    began = time.monotonic()
    broker = LocalBroker(log_dir=tmp_path)
    assert broker.external and broker.auth["security_protocol"] == "SSL"
    with pytest.raises(KafkaSecurityError, match="TLS certificate verification failed"):
        broker.start(timeout_s=TIMEOUT_S)
    # a contract, not a speed goal: said well before the wait's own timeout (the 30 s of
    # "Unable to bootstrap"); measured here: under 1 s, so the bound leaves a margin of 10x
    assert time.monotonic() - began < TIMEOUT_S / 3
    assert broker.proc is None  # no tansu was started instead

"""``make run``: a local broker, one worker, sample traffic and a live view of the revisions.

Everything runs as child processes of this one; Ctrl-C stops them all (by PID, in reverse order).
Each child has a session of its own, so the terminal's Ctrl-C reaches this process alone, which
stops them in order: sent to them too, each worker and tool printed its own rows of ``-INT-``.
A worker that fail-stops (exit 75: a record it could not deliver, app.outputs.delivery) is
started again, as Kubernetes would; any other exit stops everything.
With ``ETJ_BOOTSTRAP`` set, an existing Kafka is used instead of the bundled broker, with the
``ETJ_KAFKA_*`` TLS/SASL settings (docs/getting-started.md#your-own-kafka): the worker and the
tools get ``ETJ_BROKER_URL`` from it and the same environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from app.dev.local_broker import EXISTING_BROKER_ENV, LocalBroker
from app.runtime import EXIT_CODE as FAIL_STOP
from app.settings import Settings


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the children like Ctrl-C does
    settings = Settings()
    broker = LocalBroker(log_dir=Path("var/broker"))
    if not broker.external and os.environ.get("ETJ_BROKER_URL"):
        print(
            f"note: ETJ_BROKER_URL is not used by `make run`, which starts its own broker; "
            f"to use yours, set {EXISTING_BROKER_ENV}=host:port (and the ETJ_KAFKA_* "
            f"settings for TLS/SASL)",
            flush=True,
        )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        broker.start()
        run(broker, settings, procs)
    except KeyboardInterrupt:
        pass
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        broker.stop()
        print("stopped.", flush=True)


def run(broker: LocalBroker, settings: Settings, procs: list[subprocess.Popen[bytes]]) -> None:
    """Start the worker and the tools (into ``procs``, for :func:`main` to stop), then watch
    them until one exits."""
    env = {**os.environ, "ETJ_BROKER_URL": broker.url}
    # the demo: every built-in join, beside the joins of ETJ_JOINS_FILE if one is given
    env.setdefault("ETJ_BUILTIN_JOINS", "moods,movies,cars")
    if not broker.external:
        # tansu under-reports end offsets; batches of one make changelog recovery exact
        # (docs/contributing/tests.md)
        env.setdefault("ETJ_PRODUCER_MAX_BATCH_SIZE", "1")
        # ... and a produce request left unanswered is re-sent after 10 s instead of Faust's
        # 20 min (Faust reads PRODUCER_REQUEST_TIMEOUT from the environment; app.outputs.delivery)
        env.setdefault("PRODUCER_REQUEST_TIMEOUT", "10")
    faust = [sys.executable, "-m", "faust", "-A", "app.main"]
    Path("var").mkdir(exist_ok=True)
    worker_log = open("var/worker.log", "ab")

    def start(
        *args: str, stdout: IO[bytes] | None = None, stderr: int | None = None
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*faust, *args], env=env, start_new_session=True, stdout=stdout, stderr=stderr
        )

    def start_worker() -> subprocess.Popen[bytes]:
        return start("worker", "-l", "info", stdout=worker_log, stderr=subprocess.STDOUT)

    procs.append(start_worker())
    how = (
        f" (existing, {broker.auth.get('security_protocol', 'PLAINTEXT')})"
        if broker.external
        else " (local tansu)"
    )
    print(
        f"broker  {broker.url}{how}\n"
        f"worker  http://127.0.0.1:{settings.web_port}/  (log: var/worker.log)\n"
        f"timeline http://127.0.0.1:{settings.web_port}/timeline/\n"
        f"traffic out-of-order moods, recommendations, car arrivals and zone readings\n"
        f"Below: one line per mood-join revision (CORRECTION lines are late data fixing an "
        f"earlier answer) and one per car-view update ('car ...').\n"
        f"Stop everything with Ctrl-C.\n",
        flush=True,
    )
    time.sleep(3)
    procs.extend(start(tool) for tool in ("sample-traffic", "watch", "watch-cars"))
    while True:
        if procs[0].poll() == FAIL_STOP:
            print("the worker fail-stopped (see var/worker.log); starting it again", flush=True)
            procs[0] = start_worker()
        if not all(p.poll() is None for p in procs):
            break
        time.sleep(0.5)
    print("a child process exited; stopping (see var/worker.log)", flush=True)


if __name__ == "__main__":
    main()

"""Shared fixtures: one real broker per test session, isolated names and workers per test."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings as hypothesis_settings

from app.dev.local_broker import LocalBroker
from tests import leftovers
from tests.harness import Names, Stopped, Worker, make_names

if TYPE_CHECKING:
    from tests.image.engine import Engine

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


# no property fails for taking more than 200 ms an example (hypothesis' default deadline): on
# shared cores that is a speed goal, and a flake
hypothesis_settings.register_profile("etj", deadline=None)
hypothesis_settings.load_profile("etj")

#: where a failed end-to-end test leaves the logs of what it started (.gitignore names it)
EVIDENCE = Path(__file__).resolve().parents[1] / "test-evidence"
#: the tiers whose tests start processes: a failure there keeps their logs
END_TO_END = ("broker", "spark", "browser", "image", "docs")
#: the session broker's log (a failed test keeps its tail)
SESSION_LOGS: list[Path] = []


def xdist_worker() -> bool:
    """This process is one of pytest-xdist's workers (``make test`` runs two)."""
    return "PYTEST_XDIST_WORKER" in os.environ


def pytest_configure(config: pytest.Config) -> None:
    """This run's mark on every process it starts, and SIGTERM stops it as Ctrl-C does: the
    fixtures' teardowns run either way (tests/leftovers.py). xdist's workers keep the mark of
    the run that started them: a worker stopped before its teardown leaves processes that the
    run's own reap, at its very end, then finds."""
    if not xdist_worker():
        leftovers.mark_this_run()
    leftovers.interrupt_on_sigterm()


def pytest_unconfigure(config: pytest.Config) -> None:
    """After every teardown: whatever this run started and still runs is killed and named
    (by the run itself, not by one of its xdist workers: the other's would be killed too)."""
    if not xdist_worker():
        leftovers.say_reaped(leftovers.reap(), "the tests")


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A real Kafka-protocol broker on 127.0.0.1 (or ETJ_BOOTSTRAP's), for the whole session."""
    b = LocalBroker(log_dir=tmp_path_factory.mktemp("broker")).start()
    SESSION_LOGS.append(b.log_path)
    yield b
    b.stop()


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """The running Docker daemon, or one started here (Debian's docker.io installed if absent),
    for the whole session: the image tier and the Spark cluster of containers share it, on one
    xdist worker (``ONE_WORKER``). Each had its own, package- and module-scoped: whichever
    started the daemon stopped it at its end, under the other's running containers (a worker
    container got SIGTERM mid-test)."""
    from tests.image.engine import Engine

    e = Engine(tmp_path_factory.mktemp("dockerd")).start()
    e.remove_leftovers()
    SESSION_LOGS.append(e.log_path)
    yield e
    e.stop()


@pytest.fixture
def names(broker: LocalBroker) -> Names:
    """This test's own app id and topic names."""
    return make_names(broker.url)


@pytest.fixture
def worker_factory(
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., Worker]]:
    """Start workers with a test's env; all are stopped at the end, logs shown on failure."""
    started: list[Worker] = []

    def start(names: Names, name: str = "w", **env: str) -> Worker:
        w = Worker(
            {**names.env, **{"ETJ_" + k.upper(): str(v) for k, v in env.items()}},
            tmp_path,
            name=name,
        ).start()
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for w in started:
            print(f"\n===== log of worker {w.name} (last 6000 chars) =====\n{w.log()[-6000:]}")


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The exit codes a fail-stop asked for; the patched exit raises :class:`Stopped`."""
    from app import runtime

    codes: list[int] = []

    def exit_(code: int) -> None:
        codes.append(code)
        raise Stopped(code)

    monkeypatch.setattr(runtime, "_exit", exit_)
    return codes


def evidence_dir(item: pytest.Item) -> Path:
    """``test-evidence/<test id>``: where a failed test's logs are kept."""
    return EVIDENCE / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[:180]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    rep = yield
    setattr(item, "rep_" + rep.when, rep)
    end_to_end = any(item.get_closest_marker(t) for t in END_TO_END)
    if end_to_end and rep.failed and rep.when == "call" and hasattr(rep.longrepr, "addsection"):
        rep.longrepr.addsection(
            "evidence",
            f"the logs of every process this test started are kept in {evidence_dir(item)}",
        )
    call_rep = getattr(item, "rep_call", None)
    if end_to_end and rep.when == "teardown" and call_rep is not None and call_rep.failed:
        keep_evidence(item)
    return rep


def keep_evidence(item: pytest.Item) -> None:
    """After the teardown (the logs are whole): every log under the test's temporary folder
    (workers, containers, brokers, moto, Spark; not the workers' state), the topics a chaos run
    dumped when it was not exact (``topics/*.jsonl``, ~11 MB for the 2-minute test) and the
    tail of the session broker's log. Before, a failed chaos run's folder was gone by the time
    anyone looked: pytest keeps the temporary folders of the last three sessions only."""
    out = evidence_dir(item)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tmp = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    if isinstance(tmp, Path) and tmp.exists():
        for path in tmp.rglob("*"):
            parts = path.relative_to(tmp).parts
            if (
                path.is_file()
                and path.suffix in (".log", ".out", ".txt", ".json", ".jsonl")
                and not any(p.endswith("-data") for p in parts[:-1])
                and path.stat().st_size < 200_000_000
            ):  # a worker's datadir: RocksDB
                target = out / path.relative_to(tmp)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    for log in SESSION_LOGS:
        if log.exists():
            with log.open("rb") as f:
                f.seek(max(0, log.stat().st_size - 20_000_000))
                (out / f"session-{log.name}").write_bytes(f.read())


#: test folder -> its tier's marker (registered in pyproject.toml, --strict-markers)
TIERS = ("unit", "agent", "broker", "spark", "browser", "docs", "deploy", "image")
#: tiers whose tests share a resource made once for all of them, so one xdist worker runs them
#: all (``--dist loadgroup``): the image tier's Docker engine and image
ONE_WORKER = ("image",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier, so ``-m "unit or agent"`` picks the fast ones."""
    root = Path(__file__).parent
    for item in items:
        tier = Path(item.fspath).relative_to(root).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(
                f"{item.nodeid}: a test lives in one of the tier folders {', '.join(TIERS)}"
            )
        item.add_marker(tier)
        if tier in ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(tier))

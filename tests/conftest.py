"""Shared fixtures: one real broker per test session, isolated names and workers per test."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

from app.dev.local_broker import LocalBroker
from tests.harness import Names, Stopped, Worker, make_names

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A real Kafka-protocol broker on 127.0.0.1 (or ETJ_BOOTSTRAP's), for the whole session."""
    b = LocalBroker(log_dir=tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


@pytest.fixture
def names(broker: LocalBroker) -> Names:
    """This test's own app id and topic names."""
    return make_names(broker.url)


@pytest.fixture
def worker_factory(tmp_path: Path, request: pytest.FixtureRequest,
                   ) -> Iterator[Callable[..., Worker]]:
    """Start workers with a test's env; all are stopped at the end, logs shown on failure."""
    started: list[Worker] = []

    def start(names: Names, name: str = "w", **env: str) -> Worker:
        w = Worker({**names.env, **{"ETJ_" + k.upper(): str(v) for k, v in env.items()}},
                   tmp_path, name=name).start()
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


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    rep = yield
    setattr(item, "rep_" + rep.when, rep)
    return rep


#: test folder -> its tier's marker (registered in pyproject.toml, --strict-markers)
TIERS = ("unit", "agent", "broker", "spark", "browser", "docs", "deploy", "image")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier, so ``-m "unit or agent"`` picks the fast ones."""
    root = Path(__file__).parent
    for item in items:
        tier = Path(item.fspath).relative_to(root).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in one of the tier folders "
                                    f"{', '.join(TIERS)}")
        item.add_marker(tier)

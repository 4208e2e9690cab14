"""The worker's event loop comes from ``ETJ_EVENT_LOOP`` (app.runtime): Faust 0.15.3 parses
``faust -L`` and ignores it, so without this the worker would run on asyncio's loop."""

import asyncio

import pytest

from app import runtime
from app.settings import Settings


@pytest.fixture
def policy():
    before = asyncio.get_event_loop_policy()
    yield
    asyncio.set_event_loop_policy(before)


def test_uvloop_is_the_default_and_makes_the_loops(policy):
    asyncio.set_event_loop_policy(None)  # the standard library's
    assert Settings().event_loop == "uvloop"
    assert runtime.use_event_loop(Settings()) == "uvloop"
    loop = asyncio.new_event_loop()
    try:
        assert type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()


def test_asyncio_leaves_the_standard_loop(policy, monkeypatch):
    asyncio.set_event_loop_policy(None)
    monkeypatch.setenv("ETJ_EVENT_LOOP", "asyncio")
    assert runtime.use_event_loop(Settings()) == "asyncio"
    loop = asyncio.new_event_loop()
    try:
        assert type(loop).__module__.startswith("asyncio")
    finally:
        loop.close()


def test_an_unknown_loop_is_refused(monkeypatch):
    monkeypatch.setenv("ETJ_EVENT_LOOP", "gevent")
    with pytest.raises(ValueError, match="event_loop"):
        Settings()

"""The tier's Docker engine: a daemon that cannot start fails the tier with its own words
(never a skip), and the tier's set-up installed what it needs."""

from __future__ import annotations

import pytest

from tests.image.engine import PACKAGES, Engine, EngineError, _which


def test_a_daemon_that_cannot_start_fails_with_its_own_error(engine, tmp_path):
    # a second dockerd beside the running one refuses to start (its pid file), at once and
    # without touching the first: what the tier reports is what dockerd said
    with pytest.raises(EngineError) as failed:
        Engine(tmp_path).launch(timeout_s=30)
    assert "failed to start daemon" in str(failed.value), failed.value
    assert engine.answers(), "the running daemon must be untouched"


def test_the_engine_and_the_base_builder_are_installed():
    assert all(_which(tool) for tool in PACKAGES), {t: _which(t) for t in PACKAGES}

"""app.web.views: what ``/ready/`` (``serving``) and the keyed views (``ready``) answer from,
before the first recovery, after it, and while a later rebalance recovers partitions
(docs/operating/scaling.md#rolling-restarts)."""

from __future__ import annotations

from typing import cast

from app.compat.table_manager import EtjTableManager


async def test_a_worker_stays_ready_through_a_later_recovery_and_its_keys_do_not(monkeypatch):
    # the worker's app, its views registered as app.main does it (the bearer token first)
    from app.main import app
    from app.web import views

    recovery = cast(EtjTableManager, app.tables).recovery
    monkeypatch.setattr(app, "in_recovery", False)
    monkeypatch.setattr(recovery.completed, "is_set", lambda: False)

    # 1. its first recovery: not Ready, and its keys answer 503
    state = views.recovery_state()
    assert (state["serving"], state["ready"]) == (False, False)

    # 2. recovered: Ready, its keys answered
    monkeypatch.setattr(recovery.completed, "is_set", lambda: True)
    state = views.recovery_state()
    assert (state["serving"], state["ready"]) == (True, True)

    # 3. a rebalance gave it partitions to recover: still Ready (it forwards other keys to
    # their owners), but its own keys answer 503 until the recovery is over, as before
    monkeypatch.setattr(app, "in_recovery", True)
    state = views.recovery_state()
    assert (state["serving"], state["ready"], state["recovering"]) == (True, False, True)

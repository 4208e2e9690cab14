"""Tombstones through a foreign-key join's two agents (no broker), a spec of the user's kind
(orders x customers' regions): a right key's tombstone re-joins its left rows as null, a left
key's moves its row out and sends a tombstone for the key on the output, with its time in a
header; the built-in car join dead-letters them.

The user's spec runs in a process of its own (tests/agent/fk_deletes_scenario.py), which
declares it from ``ETJ_JOINS_FILE`` at import as a worker does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.agents.fk_join import engines
from app.faust_app import settings
from tests.agent.conftest import captured, deliver, outputs
from tests.agent.fk_deletes_scenario import SPEC_NAME, T
from tests.unit.test_fk_spec import orders

ROOT = Path(__file__).resolve().parents[2]


def test_a_right_tombstone_rejoins_as_null_a_left_one_deletes_the_key(tmp_path):
    spec = orders(name=SPEC_NAME, output="t-od-out", moves="t-od-moves", ticks="t-od-ticks")
    spec["left"] = {**spec["left"], "topic": "t-od-orders"}
    spec["right"] = {**spec["right"], "topic": "t-od-customers"}
    joins = tmp_path / "joins.json"
    joins.write_text(json.dumps([spec]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETJ_") or k == "ETJ_APP_ID"}
    env.update(PYTHONPATH=str(ROOT), ETJ_JOINS_FILE=str(joins), ETJ_DATADIR=str(tmp_path))
    run = subprocess.run(
        [sys.executable, "-m", "tests.agent.fk_deletes_scenario"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


async def test_the_car_join_dead_letters_a_tombstone():
    cars = engines["cars"]
    with captured() as sent:
        await deliver(cars.right_loop, settings.zones_topic, "3", None, timestamp=T)
        [dead] = outputs(sent, settings.dead_letter_topic)
        assert "car join" in dead["error"] and "deletes nothing" in dead["error"]

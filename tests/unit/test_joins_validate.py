"""A joins file checked before it runs (issue Z), as a person runs it: ``faust -A app.main joins
validate [FILE]`` offline (exit 0 and a line per spec, or exit 2 and one line naming the spec,
the side and the field, no traceback), the worker's own refusal of the same file in the same
one line, and ``topics create --dry-run`` with no broker (the plan from the specs). Real
processes, no broker: a port nothing listens on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.joins.catalog import movie_spec
from app.settings import Settings

FAUST = str(Path(sys.executable).with_name("faust"))
ROOT = Path(__file__).resolve().parents[2]
NO_BROKER = "kafka://127.0.0.1:1"


def faust(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ETJ_") or k == "ETJ_APP_ID"}
    environ.update(
        PYTHONPATH=str(ROOT),
        ETJ_BROKER_URL=NO_BROKER,
        ETJ_DATADIR=str(tmp_path / "data"),
        **env,
    )
    return subprocess.run(
        [FAUST, "-A", "app.main", *args],
        env=environ,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def films(**change: Any) -> dict[str, Any]:
    spec = movie_spec(Settings.model_construct())
    spec.update(name="films", ticks="films-ticks", output="films-out")
    spec["events"]["topic"], spec["dimension"]["topic"] = "film-ratings", "films"
    spec["events"].update(change)
    return spec


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps([films()]))
    bad.write_text(json.dumps([films(copy=["movie_id", "stars"])]))
    return {"good": good, "bad": bad}


WANTED = (
    "app.joins.spec.SpecError: join spec #1 'films': events.copy names 'stars', a field "
    "film-ratings records do not have (they have: id, movie_id, user_id, rating, event_time)"
)


def test_a_valid_file_says_what_each_spec_joins_and_exits_0(tmp_path, files):
    done = faust(tmp_path, "joins", "validate", str(files["good"]))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ok  films: film-ratings (movie_id) x films (movie_id) -> films-out (inner, "
        "at-or-before-else-earliest, retention 2592000000 ms)"
    ]


def test_an_invalid_file_is_one_line_and_exit_2_even_as_the_apps_own_joins_file(tmp_path, files):
    for done in (
        faust(tmp_path, "joins", "validate", str(files["bad"])),
        faust(tmp_path, "joins", "validate", ETJ_JOINS_FILE=str(files["bad"])),
    ):
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [WANTED], done.stderr
        assert done.stdout == ""


def test_the_worker_refuses_the_same_file_in_the_same_one_line(tmp_path, files):
    done = faust(tmp_path, "worker", ETJ_JOINS_FILE=str(files["bad"]))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [WANTED], done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_topics_create_dry_run_prints_the_plan_with_no_broker(tmp_path, files):
    done = faust(tmp_path, "topics", "create", "--dry-run", ETJ_JOINS_FILE=str(files["good"]))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"no broker at {NO_BROKER} (")
    assert (
        "would create   films-out (output of films, 4 partitions, cleanup.policy=delete)" in lines
    )
    assert "missing  film-ratings (input of films: created with --inputs)" in lines
    assert lines[-1].startswith("would create ") and lines[-1].endswith(" topics")
    assert "Traceback" not in done.stderr

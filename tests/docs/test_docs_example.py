"""The worked example of docs/joins/declarative.md, run as written against a real broker.

The blocks are read from the page (marked ``<!-- example: ... -->``): the spec file, the
``faust send`` commands, the ``join-latest`` command and its expected output, and the validation
messages the page shows. The only change: the example's topic names get this test's prefix, so
runs against a shared Kafka cannot see each other's records.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from typing import Any

import pytest

from app.joins.catalog import mood_spec, movie_spec
from app.joins.resolve import resolve_all
from app.joins.spec import SpecError
from app.settings import Settings
from tests.docs import pages

ROOT = pages.ROOT
DOC = pages.DOCS / "joins" / "declarative.md"


def block(name: str) -> str:
    """The fenced block right after ``<!-- example: name -->`` on the page."""
    return pages.block(DOC, name)


def faust_command(line: str) -> list[str]:
    argv = shlex.split(line)
    assert argv[0] == ".venv/bin/faust", line
    return [sys.executable, "-m", "faust", *argv[1:]]


def run(argv: list[str], env: dict[str, str], timeout_s: float = 120) -> str:
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_validation_messages_shown_are_the_real_ones():
    shown = [line.split("SpecError: ", 1)[1] for line in block("validation-messages").splitlines()]
    tiers = json.loads(block("joins.json"))[0]
    builtins = [mood_spec(Settings()), movie_spec(Settings())]

    def message(extra: list[dict[str, Any]]) -> str:
        with pytest.raises(SpecError) as exc:
            resolve_all([*builtins, *extra])
        return str(exc.value)

    typo = json.loads(json.dumps(tiers))
    typo["events"]["copy"] = ["user_id", "pgae", "event_time"]
    unknown = {**tiers, "windw_ms": 5}
    clicks = {**tiers, "name": "clicks", "output": "etj-clicks"}
    # a second join on the same events (shared: both are handed every record), from elsewhere
    latest = {**clicks, "ticks": "etj-clicks-ticks", "start": "latest"}
    assert [
        message([typo]),
        message([unknown]),
        message([tiers, clicks]),
        message([tiers, latest]),
    ] == shown


async def test_the_worked_example_works_as_written(names, worker_factory, tmp_path):
    def prefixed(text: str) -> str:
        return text.replace('"etj-', f'"{names.prefix}-etj-').replace(
            " etj-", f" {names.prefix}-etj-"
        )

    spec_file = tmp_path / "joins.json"
    spec_file.write_text(prefixed(block("joins.json")))
    w = worker_factory(names, joins_file=spec_file).wait_ready()
    env = {
        **os.environ,
        **names.env,
        "ETJ_JOINS_FILE": str(spec_file),
        "ETJ_DATADIR": str(tmp_path / "cli-data"),
    }

    sends = [line for line in block("send").splitlines() if line.strip()]
    for i, line in enumerate(sends, start=1):
        run(faust_command(prefixed(line)), env)
        deadline = time.monotonic() + 60  # the reader of the docs is slower than a script
        while time.monotonic() < deadline:
            status, body = w.get("/joins/")
            tiers = {j["name"]: j for j in body["joins"]}.get("tiers") if status == 200 else None
            if tiers and tiers["counters"]["records"] >= i:
                break
            time.sleep(0.3)
        else:
            pytest.fail(f"the worker did not take record {i} ({line})")

    [latest] = [line for line in block("latest").splitlines() if line.strip()]
    expected = prefixed(block("output")).splitlines()  # its lineage names prefixed topics
    deadline = time.monotonic() + 60
    while True:
        got = run(faust_command(latest), env).splitlines()
        if got == expected or time.monotonic() > deadline:
            break
    assert got == expected

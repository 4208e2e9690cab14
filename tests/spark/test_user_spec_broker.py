"""A join of the user's own, end to end on the real broker: a worker runs it from
``ETJ_JOINS_FILE``, the real ``archive`` command archives its topics (validated by the spec's
fields: an invalid tier is left out, as the worker dead-letters it), and ``reconcile --join
tiers`` converges; a tampered revision makes it exit 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from app.batch.cli import main
from app.joins.resolve import resolve
from tests.docs.pages import README, block
from tests.harness import Names, latest_by_id, produce, read_all, wait_for
from tests.oracle import Event, exact_answer

ARGS = ["--no-progress"]


def tiers_spec(prefix: str) -> dict[str, Any]:
    """The README's example spec (its tested ``minimal-spec`` block), on this test's topics."""
    text = block(README, "minimal-spec").replace('"etj-', f'"{prefix}-etj-')
    [spec] = json.loads(text)
    return spec  # type: ignore[no-any-return]


def archive(env: dict[str, str], folder: Path, topics: dict[str, str]) -> tuple[dict, str]:
    """``faust -A app.main archive TOPIC OUT`` for each topic, side by side: name -> path."""
    procs, paths = [], {}
    for name, (topic, ext) in ((n, t.split("|")) for n, t in topics.items()):
        paths[name] = str(folder / f"{name}.{ext}")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "faust",
                    "-A",
                    "app.main",
                    "archive",
                    topic,
                    paths[name],
                    "--idle-s",
                    "1",
                    "--quiet",
                ],
                env=env,
                stderr=subprocess.PIPE,
            )
        )
    said = ""
    for p in procs:
        _, err = p.communicate(timeout=180)
        said += err.decode(errors="replace")
        assert p.returncode == 0, said[-3000:]
    return paths, said


def test_a_joins_file_spec_streams_archives_and_reconciles(
    spark, names: Names, worker_factory, tmp_path, capsys
):
    raw = tiers_spec(names.prefix)
    spec = resolve(raw)
    joins_file = tmp_path / "joins.json"
    joins_file.write_text(json.dumps([raw]))
    worker_factory(names, joins_file=joins_file).wait_ready()

    # 1. views and tiers out of order: tiers that arrive after the views they apply to, a
    #    tie (two tiers of u2 at 1500), and a tier the worker must dead-letter (no "tier")
    views = [
        ("u1", {"id": "v1", "user_id": "u1", "page": "/home", "event_time": 1000}),
        ("u1", {"id": "v2", "user_id": "u1", "page": "/pricing", "event_time": 2000}),
        ("u2", {"id": "w1", "user_id": "u2", "page": "/", "event_time": 1600}),
        ("u3", {"id": "x1", "user_id": "u3", "page": "/", "event_time": 1200}),
    ]
    tiers = [
        ("u1", {"user_id": "u1", "tier": "gold", "event_time": 500}),
        ("u1", {"user_id": "u1", "tier": "platinum", "event_time": 1500}),
        ("u2", {"user_id": "u2", "tier": "bronze", "event_time": 1500}),
        ("u2", {"user_id": "u2", "tier": "silver", "event_time": 1500}),
        ("u3", {"user_id": "u3", "event_time": 100}),
    ]
    asyncio.run(produce(names, spec.events.topic, views[:2]))

    async def first_answers() -> int:  # joined before any tier: null, then corrected
        return len(await read_all(names, spec.output, idle_s=0.5)) >= 2

    assert asyncio.run(wait_for(first_answers, timeout_s=60))
    asyncio.run(produce(names, spec.dimension.topic, tiers))
    asyncio.run(produce(names, spec.events.topic, views[2:]))
    expected = exact_answer(
        spec.rules,
        [(k, [v["event_time"], v["tier"]]) for k, v in tiers if "tier" in v],
        [Event(k, v["id"], v["event_time"], (v["page"],)) for k, v in views],
    )
    assert expected["w1"][4] == ("silver",) and expected["x1"][4] is None

    def answer(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["id"],
            r["user_id"],
            r["event_time"],
            (r["page"],),
            None if r["tier_event_time"] is None else (r["tier"],),
            r["tier_event_time"],
        )

    async def converged() -> list[dict[str, Any]]:
        revs = [v for _, v in await read_all(names, spec.output, idle_s=1)]
        got = {i: answer(r) for i, r in latest_by_id(revs).items()}
        return revs if got == expected else []

    revs = asyncio.run(wait_for(converged, timeout_s=90))
    assert revs, "the stream never reached the exact answer"
    assert any(r["revision"] > 1 for r in revs), "the scenario must contain corrections"

    # 2. archive the spec's topics with the real command (the worker's env: it knows the spec)
    env = {
        **os.environ,
        **names.env,
        "ETJ_JOINS_FILE": str(joins_file),
        "ETJ_DATADIR": str(tmp_path / "cli-data"),
    }
    paths, said = archive(
        env,
        tmp_path,
        {
            "views": f"{spec.events.topic}|jsonl",
            "tiers": f"{spec.dimension.topic}|parquet",
            "out": f"{spec.output}|jsonl",
        },
    )
    assert f"4 records of {spec.dimension.topic}" in said and "1 invalid left out" in said
    archived = [json.loads(line) for line in Path(paths["views"]).read_text().splitlines()]
    assert all(isinstance(v["_timestamp"], int) for v in archived)  # Kafka timestamps kept

    # 3. reconcile by name: converged; over a range too
    join = [
        "--join",
        "tiers",
        "--joins-file",
        str(joins_file),
        "--events",
        paths["views"],
        "--dimension",
        paths["tiers"],
        *ARGS,
    ]
    assert main(["reconcile", *join, "--revisions", paths["out"]], spark=spark) == 0
    text = capsys.readouterr().out
    assert f"matched {len(expected)}  wrong 0  missing 0  extra 0" in text and "CONVERGED" in text
    assert (
        main(
            ["reconcile", *join, "--revisions", paths["out"], "--from", "1500", "--to", "2000"],
            spark=spark,
        )
        == 0
    )
    assert "matched 1  wrong 0" in capsys.readouterr().out  # w1 at 1600 (v2 at 2000: after)

    # 4. a tampered revision: a higher number that says another tier
    last = latest_by_id(revs)["v2"]
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(
        Path(paths["out"]).read_text()
        + json.dumps({**last, "tier": "gold", "revision": last["revision"] + 1})
        + "\n"
    )
    assert main(["reconcile", *join, "--revisions", str(tampered)], spark=spark) == 1
    text = capsys.readouterr().out
    assert "wrong 1" in text and "wrong   v2" in text and "NOT CONVERGED" in text

"""Backfill end to end on the real broker: the stream runs, a year-old mood batch arrives (the
stream can only route it to the late topic), the topics are archived with the real ``archive``
command, ``backfill`` publishes corrections, and a consumer keeping the latest revision per
join id ends on the exact answer. A second run finds nothing to do.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from app.batch.cli import main
from tests.harness import Names, latest_by_id, produce, read_all, wait_for
from tests.oracle import Mood, Recommendation, exact_mood_joins

NOW = 1_790_000_000_000
YEAR = 365 * 24 * 3_600_000
AGO = NOW - YEAR
RETENTION_MS = 60_000


def archive(
    names: Names, folder: Path, parquet: tuple[str, ...] = (), **topics: str
) -> dict[str, str]:
    """``faust -A app.main archive TOPIC OUT`` for each topic, side by side; name -> path.
    Names in ``parquet`` are archived as Parquet datasets, the others as JSON lines."""
    env = {**os.environ, **names.env}
    procs, paths = [], {}
    for name, topic in topics.items():
        paths[name] = str(folder / f"{name}.{'parquet' if name in parquet else 'jsonl'}")
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
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err.decode(errors="replace")[-3000:]
    return paths


def mood(name: str, value: str, t: int) -> tuple[str, dict[str, Any]]:
    return name, {"name": name, "mood": value, "event_time": t}


def rec(name: str, what: str, t: int, jid: str) -> tuple[str, dict[str, Any]]:
    return name, {"consultant": name, "recommendation": what, "event_time": t, "id": jid}


def answers(revisions: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {
        jid: (
            r["id"],
            r["consultant"],
            r["event_time"],
            r["recommendation"],
            r["mood"],
            r["mood_event_time"],
        )
        for jid, r in latest_by_id(revisions).items()
    }


async def output(names: Names) -> list[dict[str, Any]]:
    return [v for _, v in await read_all(names, names.output_topic, idle_s=1.5)]


def test_a_year_old_mood_batch_is_backfilled_onto_the_output_topic(
    spark, names, worker_factory, tmp_path, capsys
):
    worker_factory(names, retention_ms=RETENTION_MS).wait_ready()

    # 1. a year ago: ann and bob made recommendations; nobody had their moods then
    #    (in event-time order: ann and bob may share a partition, hence a stream clock)
    old = [
        rec(who, f"old-{i}", AGO + i * 60_000, f"{who}-old-{i}")
        for i in (1, 2, 3)
        for who in ("ann", "bob")
    ]
    asyncio.run(produce(names, names.events_topic, old))
    assert asyncio.run(wait_for(lambda: _has_ids(names, len(old)), timeout_s=60))

    # 2. now: ann is calm, both recommend; stream time moves a year on, old joins are final
    now = [mood("ann", "calm", NOW - 5_000)] + [
        rec(who, f"new-{i}", NOW + i * 1_000, f"{who}-new-{i}")
        for i in (1, 2)
        for who in ("ann", "bob")
    ]
    asyncio.run(produce(names, names.moods_topic, now[:1]))
    asyncio.run(produce(names, names.events_topic, now[1:]))
    assert asyncio.run(wait_for(lambda: _has_ids(names, len(old) + 4), timeout_s=60))

    # 3. the year-old moods arrive: far behind the horizon, the stream routes them to late
    late = [
        mood("ann", "hopeful", AGO),
        mood("bob", "grumpy", AGO + 30_000),
        mood("bob", "sleepy", AGO + 30_000),  # same millisecond: "sleepy" wins the tie
        mood("bob", "cheerful", AGO + 90_000),
    ]
    asyncio.run(produce(names, names.moods_topic, late))

    async def all_late() -> list[Any]:
        got = await read_all(names, names.late_topic, idle_s=1)
        return got if len(got) == len(late) else []

    assert asyncio.run(wait_for(all_late, timeout_s=60)), "late moods not routed to late"
    expected = exact_mood_joins(
        [Mood(v["name"], v["mood"], v["event_time"]) for _, v in [*now[:1], *late]],
        [
            Recommendation(v["consultant"], v["recommendation"], v["event_time"], v["id"])
            for _, v in [*old, *now[1:]]
        ],
    )
    before = asyncio.run(output(names))
    assert answers(before) != expected  # the stream alone cannot know

    # 4. archive the topics (the output and late topics as Parquet datasets), backfill:
    #    corrections go to the output topic
    paths = archive(
        names,
        tmp_path,
        parquet=("revisions", "late"),
        moods=names.moods_topic,
        events=names.events_topic,
        revisions=names.output_topic,
        late=names.late_topic,
    )
    backfill = [
        "backfill",
        "--moods",
        paths["moods"],
        "--events",
        paths["events"],
        "--late-moods",
        paths["late"],
        "--broker",
        names.env["ETJ_BROKER_URL"],
        "--topic",
        names.output_topic,
        "--no-progress",
    ]
    assert main([*backfill, "--revisions", paths["revisions"]], spark=spark) == 0
    wrong = {jid for jid, a in answers(before).items() if a != expected[jid]}
    assert f"published {len(wrong)} revision(s)" in capsys.readouterr().out

    # 5. a consumer keeping the latest revision per id ends on the exact answer
    async def exact_reached() -> list[dict[str, Any]]:
        revs = await output(names)
        return revs if answers(revs) == expected else []

    revs = asyncio.run(wait_for(exact_reached, timeout_s=60))
    assert revs, "the consumer's latest revisions never equalled the exact answer"
    fixes = [r for r in revs if r["cause"] == "backfill"]
    assert {r["id"] for r in fixes} == wrong
    assert expected["bob-old-1"][4] == "sleepy" and expected["bob-new-1"][4] == "cheerful"

    # 6. run again on a fresh archive of the output: nothing new, and reconcile agrees
    (tmp_path / "again").mkdir()
    again = archive(names, tmp_path / "again", revisions=names.output_topic)
    assert main([*backfill, "--revisions", again["revisions"]], spark=spark) == 0
    assert "published 0 revision(s)" in capsys.readouterr().out
    assert (
        main(
            [
                "reconcile",
                "--moods",
                paths["moods"],
                "--events",
                paths["events"],
                "--revisions",
                again["revisions"],
                "--no-progress",
            ],
            spark=spark,
        )
        == 0
    )
    assert len(asyncio.run(output(names))) == len(revs)


async def _has_ids(names: Names, count: int) -> bool:
    return len(latest_by_id(await output(names))) >= count

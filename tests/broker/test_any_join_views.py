"""A user's own join looked at and watched, on two workers (issue 48, item 1).

Scenario: two workers run a user's spec ``tiers`` (page views × user tiers, from a joins file)
next to the mood join, and split the partitions. Tiers and views for eight users go in, one tier
late (a correction). Then, whichever worker is asked:

1. ``/joins/tiers/`` describes the spec (it is a join's name, so it is not read as a consultant);
2. ``/joins/tiers/<user>/`` answers from the worker that owns the user (``served_by``), with
   the user's tier versions and the latest revision of each of their views — what the output's
   consumer rule converges to; an unknown user or join is a 404; the timeline page's key
   picker of the join (``/timeline/?join=tiers``) lists every user, gathered from both workers;
3. the mood join's old URL ``/joins/<consultant>/`` still answers a consultant's joins, and so
   does ``/joins/moods/<consultant>/``;
4. ``watch --join tiers --from-beginning`` prints every revision of the output, one line each.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from app.joins.resolve import resolve
from tests.broker.test_views import PARTITIONS, assigned_partitions
from tests.harness import Names, create_topic, latest_by_id, produce, read_all, wait_for
from tests.oracle import Event, exact_answer

T = 1_790_000_000_000
USERS = [f"u{i}" for i in range(8)]


def tiers_spec(prefix: str) -> dict[str, Any]:
    return {
        "name": "tiers",
        "events": {
            "topic": f"{prefix}-views",
            "key": "user",
            "time": "at",
            "id": "id",
            "fields": {"id": "str", "user": "str", "page": "str", "at": "time"},
            "copy": ["user", "page", "at"],
        },
        "dimension": {
            "topic": f"{prefix}-tiers",
            "key": "user",
            "time": "at",
            "fields": {"user": "str", "tier": "str", "at": "time"},
            "copy": ["tier"],
            "time_as": "tier_time",
        },
        "output": f"{prefix}-tiers-out",
        "ticks": f"{prefix}-tiers-ticks",
        "retention_ms": 10**12,
    }


def watch_lines(
    names: Names, extra_env: dict[str, str], want: int, out: Path, timeout_s: float = 90.0
) -> list[str]:
    """The lines ``watch --join tiers --from-beginning`` prints, once it printed ``want``."""
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faust",
                "-A",
                "app.main",
                "watch",
                "--join",
                "tiers",
                "--from-beginning",
            ],
            env={**os.environ, **names.env, **extra_env},
            stdout=sink,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if len(out.read_text().splitlines()) >= want:
                time.sleep(1.0)  # anything more it would print (there must be nothing)
                break
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return [line for line in out.read_text().splitlines() if line.strip()]


def test_a_user_spec_is_looked_at_by_key_on_its_owner_and_watched(names, worker_factory, tmp_path):
    raw = tiers_spec(names.prefix)
    spec = resolve(raw)
    for topic in (spec.events.topic, spec.dimension.topic):
        asyncio.run(create_topic(names, topic, PARTITIONS))
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    env = {"ETJ_JOINS_FILE": str(path), "ETJ_BUILTIN_JOINS": "moods"}
    a = worker_factory(names, name="a", joins_file=path, builtin_joins="moods")
    b = worker_factory(names, name="b", joins_file=path, builtin_joins="moods")

    async def split() -> bool:
        pa, pb = (assigned_partitions(w, spec.events.topic) for w in (a, b))
        return (
            bool(pa)
            and bool(pb)
            and not pa & pb
            and len(pa | pb) == PARTITIONS
            and a.recovered()
            and b.recovered()
        )

    assert asyncio.run(wait_for(split, timeout_s=90, every_s=0.5)), "no split"

    # inputs: two tiers per user, two views each; u0's second tier arrives after its views
    # are joined (a correction)
    tiers = [
        (u, {"user": u, "tier": t, "at": T + i * 10 + dt})
        for i, u in enumerate(USERS)
        for t, dt in (("bronze", 0), ("gold", 1000))
    ]
    views = [
        (u, {"id": f"{u}-v{k}", "user": u, "page": f"/p{k}", "at": T + i * 10 + 500 + k * 1000})
        for i, u in enumerate(USERS)
        for k in range(2)
    ]
    late = [t for t in tiers if t[0] == "u0" and t[1]["tier"] == "gold"]
    asyncio.run(produce(names, spec.dimension.topic, [t for t in tiers if t not in late]))
    asyncio.run(produce(names, spec.events.topic, views))

    async def all_joined() -> bool:  # the late tier must come after the views are joined
        return len(
            latest_by_id(v for _, v in await read_all(names, spec.output, idle_s=0.5))
        ) == len(views)

    assert asyncio.run(wait_for(all_joined, timeout_s=120)), "the views were never joined"
    asyncio.run(produce(names, spec.dimension.topic, late))
    mood = ("carol", {"name": "carol", "mood": "happy", "event_time": T})
    rec = (
        "carol",
        {"consultant": "carol", "recommendation": "bike", "event_time": T + 5, "id": "carol-1"},
    )
    asyncio.run(produce(names, names.moods_topic, [mood]))
    asyncio.run(produce(names, names.events_topic, [rec]))

    expected = exact_answer(
        spec.rules,
        [(k, [v["at"], v["tier"]]) for k, v in tiers],
        [Event(k, v["id"], v["at"], (v["page"],)) for k, v in views],
    )

    async def converged() -> dict[str, Any] | None:
        latest = latest_by_id(v for _, v in await read_all(names, spec.output, idle_s=0.5))
        got = {i: (r["tier"], r["tier_time"]) for i, r in latest.items()}
        want = {i: (e[4][0], e[5]) for i, e in expected.items()}
        return latest if got == want else None

    latest = asyncio.run(wait_for(converged, timeout_s=120))
    assert latest, "the output never reached the exact answer"
    assert latest["u0-v1"]["revision"] == 2  # the late gold tier corrected it

    # 1. the spec described, by either worker
    for w in (a, b):
        status, body = w.get("/joins/tiers/")
        assert status == 200, body
        assert (body["name"], body["kind"], body["key"]) == ("tiers", "event-time", "user")
        assert body["output"] == spec.output

    # 2. every user by key, from both workers: the same owner answers, with the latest revisions
    owners = set()
    for u in USERS:
        answers = [w.get(f"/joins/tiers/{u}/") for w in (a, b)]
        for status, body in answers:
            assert status == 200, body
        (_, first), (_, second) = answers
        assert first == second  # one owner, whoever is asked
        assert first["served_by"] in (a.url, b.url) and first["kind"] == "event-time"
        owners.add(first["served_by"])
        assert [v["tier"] for v in first["versions"]] == ["bronze", "gold"]
        assert first["joins"] == [latest[f"{u}-v0"], latest[f"{u}-v1"]]
    assert owners == {a.url, b.url}, "both workers own some users"
    # the timeline page's key picker for the join: every user, from both workers' partitions
    status, picker = a.get("/timeline/api/joins/tiers/keys/")
    assert status == 200 and picker["keys"] == USERS, picker
    assert sorted(picker["workers"]) == sorted([a.url, b.url]), picker
    assert a.get("/joins/tiers/")[1]["timeline"] == {
        "time": "at",
        "answer": "tier",
        "previous": "previous_tier",
        "label": "page",
    }
    assert a.get("/joins/tiers/nobody/")[0] == 404
    assert b.get("/joins/nojoin/u0/")[0] == 404

    # 3. the mood join's old URL, and its new one
    old = asyncio.run(wait_for(lambda: _joined(a, "/joins/carol/"), timeout_s=60))
    assert old and old["consultant"] == "carol" and old["joins"][0]["mood"] == "happy"
    status, new = b.get("/joins/moods/carol/")
    assert status == 200 and new["joins"][0]["mood"] == "happy" and new["key"] == "carol"

    # 4. watch --join: one line per revision in the output, id and revision first
    total = sum(r["revision"] for r in latest.values())  # revisions 1..n of each view
    lines = watch_lines(names, env, total, tmp_path / "watch.out")
    assert len(lines) == total, lines
    assert any(
        line.startswith("u0-v1 rev 2 [late-dimension] ") and '"gold"' in line for line in lines
    ), lines


async def _joined(worker: Any, path: str) -> dict[str, Any] | None:
    status, body = worker.get(path)
    return body if status == 200 and body.get("joins") else None

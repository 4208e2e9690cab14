"""Specs that change safely, on the real broker (issue 59 item 3; docs/operating/runbook.md#change-a-spec).

A worker runs a spec and writes its state; stopped, it is started again on the same app id with
a spec whose ``dimension.copy`` has one more field: the rows it would read hold one column
fewer, so it refuses with one line and exit code 78, before it joins anything. Started with a
compatible change instead (the events' copy in another order, the payload column unchanged; a
longer retention), it reads the state the first spec wrote, and the answer stays exact, late
versions correcting the joins the first spec made; a worker of the refused spec started beside it
refuses the partitions the rebalance gives it, and the running one goes on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from app.joins.resolve import resolve
from app.runtime import REFUSED_CODE
from tests.harness import LOCAL_SETTINGS, Names, latest_by_id, produce, read_all, wait_for
from tests.oracle import Event, exact_answer

BASE = 1_790_000_000_000
#: a refusing worker leaves the group by its session's end (it exits at once): 4 s, not 10, and
#: fetches held 100 ms, not 1.5 s, keep the test short (tests.harness.LOCAL_SETTINGS)
QUICK = {"session_timeout_s": 4, **LOCAL_SETTINGS}


def spec_of(prefix: str, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "tiers",
        "events": {
            "topic": f"{prefix}-page-views",
            "key": "user_id",
            "time": "event_time",
            "id": "id",
            "fields": {"id": "str", "user_id": "str", "page": "str", "event_time": "time"},
            "copy": ["user_id", "page", "event_time"],
        },
        "dimension": {
            "topic": f"{prefix}-user-tiers",
            "key": "user_id",
            "time": "event_time",
            "fields": {"user_id": "str", "tier": "str", "level": "int", "event_time": "time"},
            "copy": ["tier"],
            "time_as": "tier_event_time",
        },
        "output": f"{prefix}-tiered",
        "ticks": f"{prefix}-tiers-ticks",
        "retention_ms": 3_600_000,
    }
    for path, value in changes.items():
        side, _, key = path.rpartition("__")
        (raw[side] if side else raw)[key] = value
    return raw


def write(tmp_path: Path, name: str, raw: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps([raw]))
    return path


USERS = [f"u{i}" for i in range(6)]


def tier(user: str, t: int, name: str) -> dict[str, Any]:
    return {"user_id": user, "tier": name, "level": len(name), "event_time": t}


def view(i: int, user: str, t: int) -> dict[str, Any]:
    return {"id": f"v{i}", "user_id": user, "page": f"/p{i % 3}", "event_time": t}


def test_an_incompatible_spec_change_is_refused_and_a_compatible_one_stays_exact(
    names: Names, worker_factory, tmp_path
):
    first = spec_of(names.prefix)
    spec = resolve(first)
    tiers = [(u, tier(u, BASE + 1_000 * n, name)) for n, u in enumerate(USERS) for name in ["gold"]]
    views = [(u, view(i, u, BASE + 10_000 + 100 * i)) for i, u in enumerate(USERS * 3)]

    # 1. the first spec writes its state (and its fingerprint, with each partition's clock)
    w = worker_factory(names, name="first", joins_file=write(tmp_path, "first", first), **QUICK)
    w.wait_ready()
    asyncio.run(produce(names, spec.dimension.topic, tiers))
    asyncio.run(produce(names, spec.events.topic, views))

    async def answered(n: int) -> bool:
        return len(latest_by_id(v for _, v in await read_all(names, spec.output, idle_s=0.5))) >= n

    assert asyncio.run(wait_for(lambda: answered(len(views)), timeout_s=90))
    assert w.stop() == 0

    # 2. one more copied dimension field: the stored rows hold one column fewer -> refused
    wider = spec_of(names.prefix, dimension__copy=["tier", "level"])
    refused = worker_factory(
        names, name="wider", joins_file=write(tmp_path, "wider", wider), **QUICK
    )
    assert refused.wait_exit(timeout_s=120) == REFUSED_CODE
    [line] = [ln for ln in refused.log().splitlines() if "etj refuses to run join" in ln]
    assert (
        "etj refuses to run join 'tiers': partition " in line
        and "'s state was written by another spec, and this change cannot read it: "
        'dimension.copy: ["tier"] -> ["tier", "level"]. Either run the new spec under a new '
        'ETJ_APP_ID with "start" (blue/green), or rebuild this app id\'s state from its inputs '
        "(docs/operating/runbook.md#change-a-spec); or restore the spec that wrote it; "
        f"exiting ({REFUSED_CODE})"
        in line
    ), line
    print("\nrefusal:", line[line.index("etj refuses") :])
    outputs = len(asyncio.run(read_all(names, spec.output, idle_s=0.5)))

    # 3. compatible: the events' copy reordered (the payload column is page either way; the ids
    # are the records'), the retention longer: it reads the first spec's rows
    compatible = spec_of(
        names.prefix, events__copy=["page", "user_id", "event_time"], retention_ms=7_200_000
    )
    w = worker_factory(
        names, name="compatible", joins_file=write(tmp_path, "ok", compatible), **QUICK
    )
    w.wait_ready()
    # 4. beside it, a worker of the refused spec: given partitions by the rebalance, it refuses
    # them; the running worker takes them back and goes on
    second = worker_factory(
        names, name="second", joins_file=write(tmp_path, "wider", wider), **QUICK
    )
    assert second.wait_exit(timeout_s=120) == REFUSED_CODE
    assert "etj refuses to run join 'tiers': partition " in second.log()
    assert w.proc is not None and w.proc.poll() is None
    late = [(u, tier(u, BASE + 5_000 + n, "platinum")) for n, u in enumerate(USERS)]
    more = [(u, view(100 + i, u, BASE + 20_000 + 100 * i)) for i, u in enumerate(USERS)]
    asyncio.run(produce(names, spec.dimension.topic, late))  # corrects the first spec's joins
    asyncio.run(produce(names, spec.events.topic, more))

    expected = exact_answer(
        spec.rules,
        [(v["user_id"], [v["event_time"], v["tier"]]) for _, v in tiers + late],
        [Event(v["user_id"], v["id"], v["event_time"], (v["page"],)) for _, v in views + more],
    )

    async def exact() -> bool:
        latest = latest_by_id(v for _, v in await read_all(names, spec.output, idle_s=0.5))
        return {i: (r["tier"], r["tier_event_time"]) for i, r in latest.items()} == {
            i: (e[4] and e[4][0], e[5]) for i, e in expected.items()
        }

    assert asyncio.run(wait_for(exact, timeout_s=120, every_s=2))
    revisions = [v for _, v in asyncio.run(read_all(names, spec.output, idle_s=0.5))]
    assert len(revisions) > outputs, "the refused worker sent nothing; this one did"
    corrected = [r for r in revisions if r["revision"] == 2 and r["tier"] == "platinum"]
    assert len(corrected) == len(views), "every join of the first spec corrected by a late tier"
    answers: dict[tuple[str, int], set[Any]] = {}
    for r in revisions:
        answers.setdefault((r["id"], r["revision"]), set()).add((r["tier"], r["page"]))
    assert all(len(a) == 1 for a in answers.values()), answers
    assert "which this one reads right: events.copy:" in w.log()

"""A state in the layout before one row per version is converted, not refused: a worker finds a
consultant's moods as ONE ``mood-history`` row (``key -> [[event_time, mood], ...]``, what the
older version wrote to its changelog), rewrites them as ``V`` rows of the joins table
(:mod:`app.joins.keys`) and tombstones the old row, and answers exactly (tests/oracle.py).

The old rows are written into the changelog with the old encoding (Faust's json key, orjson
value), in the partition the consultant's records are in, between two runs of the worker: what
an upgrade finds.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from app.commands.sample_traffic import sample_moods_and_events
from app.joins.keys import VERSION, version_key
from tests.broker.test_broker_mood_join import send_paced
from tests.faults import answers, diff, revisions_of
from tests.harness import produce, read_all, wait_for
from tests.kafka_io import partitions_of
from tests.oracle import exact_mood_answer

START = 1_790_000_000_000
PARTITIONS = 4  # Settings.partitions' default: the names' topics are created with it


def changelog(names, table: str) -> str:
    return f"{names.env['ETJ_APP_ID']}-{table}-changelog"


@pytest.mark.xfail(strict=False, reason="known intermittent: a fresh clone's run (2 of 3) ended with old "
                   "rows not yet converted or tombstoned in time; cause not found yet (issue V, "
                   "closing note of 2026-11-28)")
async def test_an_old_layout_history_row_is_converted_and_answers_exactly(names, worker_factory):
    records = sample_moods_and_events(seed=3, count=240, start_ms=START, late_ratio=0.3,
                                      consultants=("c0", "c1", "c2", "c3", "c4"))
    expected = exact_mood_answer(records)
    moods = [r for r in records if r[0] == "mood"]
    old, rest = moods[: len(moods) // 2], [r for r in records if r not in moods[: len(moods) // 2]]
    history: dict[str, list[list]] = {}
    for _, _, v in old:  # what the old worker kept: per consultant, its moods sorted
        row = history.setdefault(v["name"], [])
        if [v["event_time"], v["mood"]] not in row:
            row.append([v["event_time"], v["mood"]])
    assert len(history) >= 3 and max(len(h) for h in history.values()) >= 5

    first = worker_factory(names, name="first").wait_ready()  # creates the topics
    assert first.stop() == 0
    topic = changelog(names, "mood-history")
    keys = sorted(history)
    for key, p in zip(keys, partitions_of([k.encode() for k in keys], PARTITIONS)):
        await produce(names, topic, [(orjson.dumps(key), orjson.dumps(sorted(history[key])))],
                      partition=p)

    worker_factory(names, name="second").wait_ready()
    await send_paced(names, rest, pace_s=0.01)

    async def exact() -> list:
        revs = await revisions_of(names)
        return revs if answers(revs) == expected else []

    revs = await wait_for(exact, timeout_s=90)
    assert revs, diff(answers(await revisions_of(names)), expected)

    # every old version became its own V row, and each old row got its tombstone
    async def converted() -> tuple | None:
        rows = await read_all(names, changelog(names, "recent-joins"))
        have = {k for k, v in rows if k[:1] == VERSION and v is not None}
        want = {version_key(k, t, [m]) for k, h in history.items() for t, m in h}
        olds = await read_all(names, topic)
        last = {}
        for k, v in olds:
            last[k] = v
        state["missing"] = len(want - have)
        state["not_tombstoned"] = [k for k in keys if last.get(orjson.dumps(k), b"") is not None]
        return not state["missing"] and not state["not_tombstoned"]

    # an old row's tombstone is written by the first batch that touches its key after the
    # converting record is known delivered (app.joins.state): a key nothing touches again keeps
    # its old row. So each key still holding one is touched, once a second, until none does
    state: dict = {}
    last_ms = max(v["event_time"] for _, _, v in records)
    for touch in range(30):
        if await converted():
            break
        await send_paced(names, [("event", k, {"consultant": k, "recommendation": "touch",
                                               "event_time": last_ms + 1 + touch,
                                               "id": f"touch-{k}-{touch}"})
                                 for k in state["not_tombstoned"]], pace_s=0)
        await asyncio.sleep(1)
    assert await wait_for(converted, timeout_s=30), f"old rows not converted: {state}"

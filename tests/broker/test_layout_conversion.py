"""A state in the layout before one row per version is converted, not refused: a worker finds a
consultant's moods as ONE ``mood-history`` row (``key -> [[event_time, mood], ...]``, what the
older version wrote to its changelog), rewrites them as ``V`` rows of the joins table
(:mod:`app.joins.keys`) and tombstones the old row, and answers exactly (tests/oracle.py).

The old rows are written into the changelog with the old encoding (Faust's json key, orjson
value), in the partition the consultant's records are in, between two runs of the worker: what
an upgrade finds.
"""

from __future__ import annotations

import orjson

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


async def test_an_old_layout_history_row_is_converted_and_answers_exactly(names, worker_factory):
    records = sample_moods_and_events(
        seed=3,
        count=240,
        start_ms=START,
        late_ratio=0.3,
        consultants=("c0", "c1", "c2", "c3", "c4"),
    )
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
        await produce(
            names, topic, [(orjson.dumps(key), orjson.dumps(sorted(history[key])))], partition=p
        )
    # the old rows are in the log before the worker that converts them starts (a run ended
    # with the changelog empty at the second worker's recovery: said here, not as a wrong answer)
    written = {k for k, v in await read_all(names, topic, idle_s=1.0) if v is not None}
    assert written == {orjson.dumps(k) for k in keys}, f"old rows not in {topic}: {written}"

    worker_factory(names, name="second").wait_ready()
    await send_paced(names, rest, pace_s=0.01)

    async def exact() -> list:
        revs = await revisions_of(names)
        return revs if answers(revs) == expected else []

    revs = await wait_for(exact, timeout_s=90)
    assert revs, diff(answers(await revisions_of(names)), expected)

    # every old version became its own V row, and each old row got its tombstone: once the
    # first record that converted the key is delivered, at the end of any later batch (the
    # revisit ticks make one every second: ETJ_REVISIT_INTERVAL_S), touched or not
    state: dict = {}

    async def converted() -> bool:
        rows = await read_all(names, changelog(names, "recent-joins"), idle_s=1.0)
        have = {k for k, v in rows if k[:1] == VERSION and v is not None}
        want = {version_key(k, t, [m]) for k, h in history.items() for t, m in h}
        last = dict(await read_all(names, topic, idle_s=1.0))
        state["missing"] = len(want - have)
        state["not_tombstoned"] = [k for k in keys if last.get(orjson.dumps(k), b"") is not None]
        return not state["missing"] and not state["not_tombstoned"]

    assert await wait_for(converted, timeout_s=60), f"old rows not converted: {state}"

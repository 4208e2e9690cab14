"""One consultant with more moods than one produce request holds, on the real broker.

A user's report: one consultant with 20,000 moods of 190 characters and 600 recommendations;
the worker exited (75, ``MessageSizeTooLargeError``) and answered none of them, again on every
restart: the consultant's moods were one table row, past the 1,000,000-byte request limit.
Each mood is a row of its own now (``V`` rows, app.joins.keys). Here 6,000 moods of 190
characters (a 1.2 MB row in the layout before), a tenth of them late: every recommendation is
answered exactly, the worker stops cleanly, and a new one recovering the moods from the
changelog answers a new recommendation from them.
"""

from __future__ import annotations

from typing import Any

from tests.faults import answers, diff, revisions_of
from tests.harness import batched, bootstrap, wait_for
from tests.kafka_io import create_topics, jbytes, produce_bulk
from tests.oracle import exact_mood_answer

START = 1_790_000_000_000
PARTITIONS = 4
MOODS, RECS = 6_000, 600


async def send(names: Any, records: list[tuple[str, str, dict[str, Any]]]) -> None:
    topic = {"mood": names.moods_topic, "event": names.events_topic}
    await produce_bulk(
        bootstrap(names), [(topic[k], key.encode(), jbytes(v)) for k, key, v in records], PARTITIONS
    )


async def test_one_consultant_with_a_request_s_worth_of_moods_is_answered_exactly(
    names, worker_factory
):
    names = batched(names)
    moods = [
        (
            "mood",
            "hot",
            {"name": "hot", "mood": f"{i:07d}" + "y" * 183, "event_time": START + i * 10},
        )
        for i in range(MOODS)
    ]
    recs = [
        (
            "event",
            "hot",
            {
                "consultant": "hot",
                "recommendation": f"r{i}",
                "event_time": START + i * 100 + 5,
                "id": f"hot-{i}",
            },
        )
        for i in range(RECS)
    ]
    late = [m for i, m in enumerate(moods) if i % 10 == 3]
    early = [m for i, m in enumerate(moods) if i % 10 != 3]
    assert sum(len(m[2]["mood"]) for m in moods) > 1_000_000  # one row would not fit
    await create_topics(bootstrap(names), [names.moods_topic, names.events_topic], PARTITIONS)
    first = worker_factory(names, name="first").wait_ready()
    await send(names, early + recs)
    await send(names, late)
    expected = exact_mood_answer(early + recs + late)
    assert len(expected) == RECS

    async def exact() -> list[dict[str, Any]]:
        revs = await revisions_of(names)
        return revs if answers(revs) == expected else []

    revs = await wait_for(exact, timeout_s=120)
    assert revs, diff(answers(await revisions_of(names)), expected)
    assert first.stop() == 0, first.log()[-3000:]

    # a new process recovers the 6,000 moods from the changelog and answers from them
    worker_factory(names, name="second").wait_ready(timeout_s=120)
    one_more = [
        (
            "event",
            "hot",
            {
                "consultant": "hot",
                "recommendation": "after",
                "event_time": START + MOODS * 10 + 1,
                "id": "hot-after",
            },
        )
    ]
    await send(names, one_more)
    expected = exact_mood_answer(early + recs + late + one_more)
    assert expected["hot-after"][4] == moods[-1][2]["mood"]
    revs = await wait_for(exact, timeout_s=120)
    assert revs, diff(answers(await revisions_of(names)), expected)

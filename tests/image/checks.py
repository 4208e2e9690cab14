"""Checks the image tier's scenarios share: the car view against the oracle, snapshots that
cover the changelogs."""

from __future__ import annotations

from app.state.snapshot_store import Snapshots
from tests.broker.test_snapshots import newest_offsets, read_changelog
from tests.harness import Names, bootstrap, read_all, wait_for
from tests.oracle import exact_car_view, newest_car_outputs


def car_topics(names: Names) -> dict[str, str]:
    return {"car": names.car_arrivals_topic, "zone": names.zones_topic}


async def car_view_is_exact(names: Names, cars: list, timeout_s: float = 120) -> None:
    """Wait until the consumer rule's view of the car output equals the oracle's over
    ``cars`` ((kind, key, value) as sent); fail with the cars that differ."""
    expected = exact_car_view(
        [v for k, _, v in cars if k == "car"], [v for k, _, v in cars if k == "zone"]
    )

    async def view() -> dict:
        return newest_car_outputs(
            v for _, v in await read_all(names, names.car_pollution_topic, idle_s=1.5)
        )

    got = await wait_for(lambda: _equal_or_empty(view, expected), timeout_s=timeout_s)
    got = got or await view()
    assert got == expected, {
        c: (got.get(c), expected[c]) for c in expected if got.get(c) != expected[c]
    }


async def _equal_or_empty(view, expected: dict) -> dict:
    got = await view()
    return got if got == expected else {}


async def wait_snapshots(
    names: Names, snaps: Snapshots, caught_up: bool = False, timeout_s: float = 60
) -> dict[str, dict[int, int]]:
    """Wait until every changelog partition with records has a snapshot (``caught_up``: one at
    its last offset); changelog topic -> {partition: the newest snapshot's offset}."""
    topics = await _changelog_topics(names)

    async def covered() -> dict[str, dict[int, int]] | None:
        out = {}
        for topic in topics:
            log = await read_changelog(names, topic)
            ends = {p: records[-1][0] for p, records in log.items() if records}
            have = await newest_offsets(snaps, topic)
            if any(p not in have or (caught_up and have[p] != end) for p, end in ends.items()):
                return None
            out[topic] = have
        return out

    got = await wait_for(covered, timeout_s=timeout_s, every_s=1.0)
    assert got, f"no snapshot {'at the end ' if caught_up else ''}of every changelog partition"
    return got


async def _changelog_topics(names: Names) -> list[str]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(names))
    await consumer.start()
    try:
        return sorted(
            t
            for t in await consumer.topics()
            if t.startswith(names.app_id + "-") and t.endswith("-changelog")
        )
    finally:
        await consumer.stop()

"""A user's own topics on a real broker: the README's spec runs alone (no built-in join, no
``etj-*`` topic of theirs), on its own partition count (6, beside ETJ_PARTITIONS=4), and a
producer with librdkafka's default partitioner (CRC32) is named in the log at start and its
records are dead letters that say what to set, while the rest joins exactly."""

from __future__ import annotations

import json
import zlib
from typing import Any

from app.joins.resolve import resolve
from app.kafka.copartition import fetch_partition_counts
from tests.docs.pages import README, block
from tests.faults import worker_metrics
from tests.harness import Names, create_topic, latest_by_id, produce, read_all, wait_for
from tests.kafka_io import partitions_of
from tests.oracle import Event, exact_answer

N = 6


def crc32_partition(key: bytes) -> int:
    """librdkafka's ``consistent_random`` for a keyed record: CRC32 of the key."""
    return (zlib.crc32(key) & 0xFFFFFFFF) % N


async def test_a_user_spec_runs_alone_on_its_own_count_and_a_crc32_producer_is_caught(
    names: Names, worker_factory, tmp_path
):
    raw = json.loads(block(README, "minimal-spec").replace('"etj-', f'"{names.prefix}-etj-'))[0]
    raw["partitions"] = N
    spec = resolve(raw)
    for topic in (spec.events.topic, spec.dimension.topic, spec.output):
        await create_topic(names, topic, N)

    # 1. before the worker starts, a CRC32 producer wrote tiers of users whose partition it
    #    gets wrong
    users = [f"user-{i}" for i in range(40)]
    right = dict(zip(users, partitions_of([u.encode() for u in users], N)))
    misplaced = [u for u in users if crc32_partition(u.encode()) != right[u]][:3]
    assert len(misplaced) == 3
    for u in misplaced:
        await produce(
            names,
            spec.dimension.topic,
            [(u, {"user_id": u, "tier": "crc", "event_time": 50})],
            partition=crc32_partition(u.encode()),
        )
    joins_file = tmp_path / "joins.json"
    joins_file.write_text(json.dumps([raw]))
    w = worker_factory(names, joins_file=joins_file).wait_ready()
    assert (
        f"input topic {spec.dimension.topic}: 3 of the 3 keyed records sampled at start "
        "are not in the partition Kafka's default partitioner gives their key"
    ) in w.log()
    assert "partitioner=murmur2_random" in w.log()

    # 2. alone: not one built-in join's topic or changelog; its own made with its count
    app_id = names.env["ETJ_APP_ID"]
    builtin = [
        names.events_topic,
        names.moods_topic,
        names.ratings_topic,
        names.movies_topic,
        names.ticks_topic,
        names.car_arrivals_topic,
        names.zones_topic,
        names.car_ticks_topic,
        names.car_moves_topic,
        f"{app_id}-recent-joins-changelog",
        f"{app_id}-movies-joins-changelog",
        f"{app_id}-car-positions-changelog",
    ]
    own = [
        spec.ticks,
        *(
            f"{app_id}-{t}-changelog"
            for t in (spec.tables.dimension, spec.tables.joins, spec.tables.clock)
        ),
    ]
    counts = await fetch_partition_counts(
        names.env["ETJ_BROKER_URL"], builtin + own, names.client_auth()
    )
    assert [t for t in builtin if t in counts] == []
    assert {t: counts.get(t) for t in own} == dict.fromkeys(own, N)

    # 3. out-of-order views and tiers from a murmur2 producer (aiokafka's default), and one
    #    more tier from the CRC32 producer while the worker runs
    views = [
        (u, {"id": f"v{i}", "user_id": u, "page": f"/p{i % 3}", "event_time": 1000 + i})
        for i, u in enumerate(users)
    ]
    tiers = [
        (u, {"user_id": u, "tier": ["gold", "silver"][i % 2], "event_time": 900 + 3 * i})
        for i, u in enumerate(users)
    ]
    await produce(names, spec.events.topic, views[::2])
    await produce(names, spec.dimension.topic, tiers)
    await produce(names, spec.events.topic, views[1::2])
    late_crc = misplaced[0]
    await produce(
        names,
        spec.dimension.topic,
        [(late_crc, {"user_id": late_crc, "tier": "crc", "event_time": 999})],
        partition=crc32_partition(late_crc.encode()),
    )
    expected = exact_answer(
        spec.rules,
        [(k, [v["event_time"], v["tier"]]) for k, v in tiers],
        [Event(k, v["id"], v["event_time"], (v["page"],)) for k, v in views],
    )

    def answer(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["id"],
            r["user_id"],
            r["event_time"],
            (r["page"],),
            None if r["tier_event_time"] is None else (r["tier"],),
            r["tier_event_time"],
        )

    async def converged() -> dict[str, Any] | None:
        revs = [v for _, v in await read_all(names, spec.output, idle_s=1)]
        got = {i: answer(r) for i, r in latest_by_id(revs).items()}
        return got if got == expected else None

    assert await wait_for(converged, timeout_s=90), "the join never reached the exact answer"

    # 4. each CRC32 record: a dead letter naming the fix, counted; none joined
    async def four_dead() -> list[Any] | None:
        dead = [v for _, v in await read_all(names, names.dead_letter_topic, idle_s=1)]
        return dead if len(dead) >= 4 else None

    dead = await wait_for(four_dead, timeout_s=60)
    assert dead is not None and len(dead) == 4
    assert {json.loads(d["value"])["user_id"] for d in dead} == set(misplaced)
    assert all("partitioner=murmur2_random" in d["error"] for d in dead)
    # (the label after "join" in the exposition's order: the rule)
    assert worker_metrics(w)["etj_refused_records_total"] == {"partitioner": 4.0}

    # 5. the views of a worker without the built-in joins
    for path in ("/health/", "/stats/", "/metrics", "/joins/"):
        status, body = w.get(path)
        assert status == 200, (path, body)
    assert w.get("/stats/")[1]["join_partitions"].keys() == {"tiers"}

"""The web views on a real broker, with two worker processes.

Scenario: two workers split the partitions; moods and recommendations for a dozen consultants go
in (plus one malformed and one late mood), then cars moving between zones and zone readings.
Whichever worker is asked, a keyed view answers from the worker that owns the key
(``served_by``) with what the join holds; unknown keys are 404s; /stats/ and /metrics count
exactly what was sent; /ready/ is 503 while a worker recovers a large changelog and 200 once
the recovered rows can be read.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from prometheus_client.parser import text_string_to_metric_families

from app.logic.car_join import CarArrival, ZoneReading, exact_car_view
from app.settings import Settings
from tests.harness import (
    Names,
    Worker,
    bootstrap,
    create_topic,
    latest_by_id,
    produce,
    read_all,
    wait_for,
)
from tests.oracle import Mood, Recommendation, exact_mood_joins

START = 1_790_000_000_000
RETENTION_MS = 600_000
PARTITIONS: int = Settings.model_fields["partitions"].default
MOOD_WORDS = ("happy", "sad", "tired", "focused")


def partition_of(key: str) -> int:
    """Where a producer with Kafka's default partitioner puts a record keyed ``key``."""
    parts = list(range(PARTITIONS))
    return int(DefaultPartitioner()(key.encode(), parts, parts))


def assigned_partitions(worker: Worker, topic: str) -> set[int]:
    """The worker's latest assignment of ``topic`` from its log (``{0, 2}`` or ``{0-3}``)."""
    out: set[int] = set()
    for lo, hi in re.findall(r"(\d+)(?:-(\d+))?", worker.assigned(topic)):
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def owners_by_partition(workers: list[Worker], topic: str) -> dict[int, str]:
    """partition of ``topic`` -> URL of the worker that has it (each partition exactly once)."""
    out: dict[int, str] = {}
    for w in workers:
        for p in assigned_partitions(w, topic):
            assert p not in out, f"partition {p} of {topic} assigned twice"
            out[p] = w.url
    assert set(out) == set(range(PARTITIONS)), f"{topic} not fully assigned: {out}"
    return out


def metric_sums(workers: list[Worker]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of every worker's /metrics, summed over workers: {(name, labels): value}."""
    sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for w in workers:
        status, text = w.get("/metrics")
        assert status == 200, text
        for family in text_string_to_metric_families(text.decode()):
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                sums[key] = sums.get(key, 0.0) + s.value
    return sums


def scenario(
    names: Names,
) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]], dict[str, list[tuple[int, str]]]]:
    """(moods, recommendations, expected mood history per consultant); all within retention."""
    moods, events, history = [], [], {}
    for i in range(12):
        who = f"consultant-{i}"
        for k in range(3):
            t, mood = START + i * 10 + k * 1000, MOOD_WORDS[(i + k) % len(MOOD_WORDS)]
            moods.append((who, {"name": who, "mood": mood, "event_time": t}))
            history.setdefault(who, []).append((t, mood))
        for k in range(2):
            events.append(
                (
                    who,
                    {
                        "consultant": who,
                        "recommendation": f"product-{k}",
                        "event_time": START + i * 10 + 500 + k * 1000,
                        "id": f"rec-{i}-{k}",
                    },
                )
            )
    return moods, events, history


async def two_workers(
    names: Names, worker_factory: Any, b_store: str = "memory://"
) -> tuple[Worker, Worker]:
    """Two workers that have split the partitions between them and are both ready."""
    a = worker_factory(names, name="a", retention_ms=RETENTION_MS)
    b = worker_factory(names, name="b", retention_ms=RETENTION_MS, store_url=b_store)
    everything = set(range(PARTITIONS))

    async def split() -> bool:
        pa = assigned_partitions(a, names.moods_topic)
        pb = assigned_partitions(b, names.moods_topic)
        return (
            bool(pa)
            and bool(pb)
            and not pa & pb
            and pa | pb == everything
            and a.recovered()
            and b.recovered()
        )

    assert await wait_for(split, timeout_s=60, every_s=0.5), "the workers never split the work"
    return a, b


async def test_views_answer_for_keys_owned_by_the_other_worker(names, worker_factory):
    a, b = await two_workers(names, worker_factory)
    moods, events, history = scenario(names)
    bad_mood = ("consultant-0", b"{not json")
    late_mood = (
        "consultant-1",
        {"name": "consultant-1", "mood": "ancient", "event_time": START - 2 * RETENTION_MS},
    )

    # 1. inputs: moods, then recommendations, then a malformed and a late mood (same partition
    #    as consultant-1's other moods, so its stream time is already far ahead)
    await produce(names, names.moods_topic, moods)
    await produce(names, names.events_topic, events)
    await produce(names, names.moods_topic, [bad_mood, late_mood])
    sent = {names.moods_topic: len(moods) + 2, names.events_topic: len(events)}

    # 2. every record counted once, across both workers
    async def all_counted() -> dict[Any, float] | None:
        sums = metric_sums([a, b])
        got = {
            t: sums.get(("etj_records_in_total", (("join", "moods"), ("topic", t))), 0.0)
            for t in sent
        }
        return sums if got == sent else None

    sums = await wait_for(all_counted, timeout_s=45, every_s=0.5)
    assert sums, f"/metrics never counted {sent}"
    assert sums[("etj_dead_letters_total", (("join", "moods"), ("topic", names.moods_topic)))] == 1
    assert sums[("etj_late_records_total", (("join", "moods"), ("topic", names.moods_topic)))] == 1

    # 3. the output converged to the exact answer; its latest revisions are what /joins/ shows
    expected = exact_mood_joins(
        [Mood(v["name"], v["mood"], v["event_time"]) for _, v in moods],
        [
            Recommendation(v["consultant"], v["recommendation"], v["event_time"], v["id"])
            for _, v in events
        ],
    )

    async def converged() -> list[dict[str, Any]]:
        revs = [v for _, v in await read_all(names, names.output_topic, idle_s=1.0)]
        latest = latest_by_id(revs)
        answers = {
            i: (
                r["id"],
                r["consultant"],
                r["event_time"],
                r["recommendation"],
                r["mood"],
                r["mood_event_time"],
            )
            for i, r in latest.items()
        }
        return revs if answers == expected else []

    revisions = await wait_for(converged, timeout_s=45)
    assert revisions, "the revision log never converged"
    latest = latest_by_id(revisions)
    emitted = sum(v for (n, _), v in metric_sums([a, b]).items() if n == "etj_revisions_total")
    assert emitted == len(revisions), "etj_revisions_total differs from the revision log"

    # 4. keyed views, each asked of the worker that does NOT own the key
    owners = {w.url: assigned_partitions(w, names.moods_topic) for w in (a, b)}
    asked_of = {a.url: 0, b.url: 0}
    for who, moods_of in history.items():
        owner = next(u for u, ps in owners.items() if partition_of(who) in ps)
        other = b if owner == a.url else a
        asked_of[other.url] += 1

        status, body = other.get(f"/moods/{who}/")
        assert status == 200, body
        assert body["served_by"] == owner and body["partition"] == partition_of(who)
        assert [(m["event_time"], m["mood"]) for m in body["moods"]] == sorted(moods_of)

        status, body = other.get(f"/joins/{who}/")
        assert status == 200, body
        assert body["served_by"] == owner
        want = sorted(
            (r for r in latest.values() if r["consultant"] == who),
            key=lambda r: (r["event_time"], r["id"]),
        )
        fields = (
            "id",
            "event_time",
            "recommendation",
            "mood",
            "mood_event_time",
            "revision",
            "cause",
            "previous_mood",
        )
        assert [tuple(j[f] for f in fields) for j in body["joins"]] == [
            tuple(r[f] for f in fields) for r in want
        ]
    assert all(asked_of.values()), f"both workers must own some consultants: {owners}"

    # 5. unknown keys: a JSON 404 from either worker, whoever owns the key's partition
    for w in (a, b):
        for path in ("/moods/nobody-at-all/", "/joins/nobody-at-all/", "/moods/ghost-7/"):
            status, body = w.get(path)
            assert status == 404 and "error" in body, (w.name, path, status, body)

    # 6. /stats/: per-worker counters add up to what was sent; clocks of every partition
    stats = [w.get("/stats/")[1] for w in (a, b)]
    assert sum(s["records_in"].get(names.events_topic, 0) for s in stats) == len(events)
    assert sum(s["records_in"].get(names.moods_topic, 0) for s in stats) == len(moods) + 2
    assert sum(s["dead_letters"].get(names.moods_topic, 0) for s in stats) == 1
    assert sum(s["late"].get(names.moods_topic, 0) for s in stats) == 1
    assert sum(s["joins"] for s in stats) == len(expected)
    assert sum(s["joins"] + s["corrections"] for s in stats) == len(revisions)
    clocks = {p: c for s in stats for p, c in s["partitions"].items()}
    assert set(clocks) == {str(p) for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        times = [v["event_time"] for k, v in moods + events if partition_of(k) == p]
        c = clocks[str(p)]
        assert c["stream_time"] == (max(times) if times else None)
        if times:
            assert c["retention_horizon"] == max(times) - RETENTION_MS
    for s in stats:
        assert s["ready"] is True and s["tables"]["recent-joins"] >= 1  # joins and moods

    # 7. liveness
    for w in (a, b):
        status, body = w.get("/health/")
        assert status == 200 and body["status"] == "ok"


async def fill_changelog(names: Names, rows: int) -> dict[str, list[list[Any]]]:
    """Write ``rows`` mood histories straight into the mood-history changelog, as the agent would
    (JSON key and value, in the partition of the consultant's raw key). Returns a few of them.

    tansu reports the first offset of a partition's newest batch + 1 as its end (docs/contributing/tests.md), so
    the bulk goes in batches and every partition then gets one row alone, which makes each
    partition's end offset exact.
    """
    topic = f"{names.env['ETJ_APP_ID']}-mood-history-changelog"
    await create_topic(names, topic, PARTITIONS)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap(names),
        **names.client_auth(),
        linger_ms=20,
        max_batch_size=256 * 1024,
    )
    await producer.start()
    samples: dict[str, list[list[Any]]] = {}
    try:

        def row(i: int) -> tuple[str, list[list[Any]]]:
            return f"bulk-{i}", [[START + i, MOOD_WORDS[i % 4]], [START + i + 1, "calm"]]

        pending = []
        for i in range(rows):
            who, value = row(i)
            pending.append(
                await producer.send(
                    topic,
                    json.dumps(value).encode(),
                    key=json.dumps(who).encode(),
                    partition=partition_of(who),
                )
            )
        await asyncio.gather(*pending)
        await producer.flush()
        tails: dict[int, str] = {}
        i = rows
        while len(tails) < PARTITIONS:
            who, value = row(i)
            if partition_of(who) not in tails:
                tails[partition_of(who)] = who
                await producer.send_and_wait(
                    topic,
                    json.dumps(value).encode(),
                    key=json.dumps(who).encode(),
                    partition=partition_of(who),
                )
                samples[who] = value
            i += 1
        samples["bulk-0"] = row(0)[1]
        samples[f"bulk-{rows // 2}"] = row(rows // 2)[1]
    finally:
        await producer.stop()
    return samples


async def test_ready_is_503_while_recovering_and_200_once_recovered(names, worker_factory):
    samples = await fill_changelog(names, rows=40_000)
    w = worker_factory(names, name="recovering")

    # poll /ready/ until 200; remember whether a 503 ever said it was recovering rows
    seen_recovering = False
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status, body = w.get("/ready/", timeout_s=2.0)
        if status == 503:
            assert body["ready"] is False
            seen_recovering |= body["recovering"] and body["active_remaining"] > 0
        elif status == 200:
            break
        if w.proc is not None and w.proc.poll() is not None:
            raise AssertionError("worker exited:\n" + w.log()[-4000:])
        await asyncio.sleep(0.05)
    assert status == 200, f"/ready/ never said 200: {status} {body}"
    assert seen_recovering, "/ready/ never reported a recovery in progress with rows remaining"

    # the moment it says ready, what it recovered is there (the last row of each partition too)
    for who, value in samples.items():
        status, body = w.get(f"/moods/{who}/")
        assert status == 200, (who, body)
        assert [[m["event_time"], m["mood"]] for m in body["moods"]] == value
    status, body = w.get("/moods/bulk-that-was-never-written/")
    assert status == 404 and "error" in body


def car_scenario(seed: int = 7) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(car arrivals, zone readings) in arrival order: 24 cars moving between zones 0-4 (zone 4
    gets no reading: its cars have no pollution), zones 0-3 and 9 (9 never gets a car) read
    twice; event times shuffled, so older arrivals often come in after newer ones."""
    rng = random.Random(seed)
    arrivals = [
        (
            str(c),
            {
                "car_id": c,
                "to_zone_id": rng.randrange(5),
                "fuel_level": round(rng.uniform(1, 60), 1),
                "event_time": START + rng.randrange(100_000),
            },
        )
        for c in range(24)
        for _ in range(rng.randrange(1, 4))
    ]
    readings = [
        (
            str(z),
            {
                "zone_id": z,
                "pollution_level": round(rng.uniform(0, 200), 1),
                "event_time": START + rng.randrange(100_000),
            },
        )
        for z in (0, 1, 2, 3, 9)
        for _ in range(2)
    ]
    rng.shuffle(arrivals)
    rng.shuffle(readings)
    return arrivals, readings


async def test_car_and_zone_views_answer_for_keys_owned_by_the_other_worker(names, worker_factory):
    # b keeps its tables in RocksDB (the production store): its zones' cars are range scans
    # over rocksdict iterators, a's over the memory store's sorted index
    a, b = await two_workers(names, worker_factory, b_store="rocksdb://")
    workers = {a.url: a, b.url: b}
    arrivals, readings = car_scenario()
    expected = exact_car_view(
        [
            CarArrival(v["car_id"], v["to_zone_id"], v["fuel_level"], v["event_time"])
            for _, v in arrivals
        ],
        [ZoneReading(v["zone_id"], v["pollution_level"], v["event_time"]) for _, v in readings],
    )
    newest_reading = {
        z.zone_id: z
        for z in sorted(
            (ZoneReading(v["zone_id"], v["pollution_level"], v["event_time"]) for _, v in readings),
            key=lambda z: z.order,
        )
    }

    # 1. zone readings and car arrivals interleaved; one malformed arrival
    await produce(names, names.zones_topic, readings[:4])
    await produce(names, names.car_arrivals_topic, arrivals[: len(arrivals) // 2])
    await produce(names, names.zones_topic, readings[4:])
    await produce(
        names,
        names.car_arrivals_topic,
        arrivals[len(arrivals) // 2 :] + [("3", {"car_id": 3, "to_zone_id": "one"})],
    )

    car_owner = owners_by_partition([a, b], names.car_arrivals_topic)
    zone_owner = owners_by_partition([a, b], names.zones_topic)

    def other(owner: str) -> Worker:
        return workers[b.url if owner == a.url else a.url]

    # 2. every car's view, asked of the worker that does not own the car, converges to the
    #    exact answer; it is served by the car's owner, the zone part by the zone's owner
    async def car_views() -> dict[int, Any]:
        got = {}
        for car_id in expected:
            owner = car_owner[partition_of(str(car_id))]
            status, body = other(owner).get(f"/cars/{car_id}/")
            got[car_id] = (status, body)
        return got

    async def cars_converged() -> dict[int, Any] | None:
        got = await car_views()
        ok = all(
            st == 200 and {k: body[k] for k in want.to_wire()} == want.to_wire()
            for (st, body), want in zip(got.values(), expected.values())
        )
        return got if ok else None

    got = await wait_for(cars_converged, timeout_s=60, every_s=1.0)
    assert got, (
        f"car views never matched the exact answer: {await car_views()}\n"
        f"stats: {[w.get('/stats/') for w in (a, b)]}"
    )
    crossed = 0
    for car_id, (_, body) in got.items():
        assert body["served_by"] == car_owner[partition_of(str(car_id))]
        zone_id = expected[car_id].zone_id
        assert body["zone_served_by"] == zone_owner[partition_of(str(zone_id))]
        crossed += body["zone_served_by"] != body["served_by"]
    assert crossed, "no car whose zone lives on the other worker: the test proves too little"
    assert any(out.pollution_level is None for out in expected.values())  # zone 4's cars

    # 3. each zone's cars, asked of the worker that does not own the zone (the zone side lags
    #    the car side: its ADD/DEL moves come through an internal topic)
    def zone_answer(zone_id: int) -> dict[str, Any]:
        reading = newest_reading.get(zone_id)
        return {
            "zone_id": zone_id,
            "partition": partition_of(str(zone_id)),
            "served_by": zone_owner[partition_of(str(zone_id))],
            "pollution_level": reading and reading.pollution_level,
            "zone_event_time": reading and reading.event_time,
            "truncated": False,
            "cars": sorted(
                (out.to_wire() for out in expected.values() if out.zone_id == zone_id),
                key=lambda c: c["car_id"],
            ),
        }

    async def zone_views() -> dict[int, Any]:
        return {
            z: other(zone_owner[partition_of(str(z))]).get(f"/zones/{z}/cars/")
            for z in (0, 1, 2, 3, 4, 9)
        }

    async def zones_converged() -> bool:
        return all(got == (200, zone_answer(z)) for z, got in (await zone_views()).items())

    assert await wait_for(zones_converged, timeout_s=60, every_s=1.0), (
        f"zone views never matched: {await zone_views()}"
    )
    busiest = max(range(5), key=lambda z: sum(o.zone_id == z for o in expected.values()))
    status, body = a.get(f"/zones/{busiest}/cars/?limit=1")
    assert status == 200 and len(body["cars"]) == 1 and body["truncated"] is True
    assert a.get("/zones/1/cars/?limit=lots")[0] == 400

    # 4. unknown or impossible ids: JSON 404s from either worker
    for w in (a, b):
        for path in (
            "/cars/999999/",
            "/cars/abc/",
            "/cars/-1/",
            f"/cars/{2**64}/",
            "/zones/77/cars/",
            "/zones/x/cars/",
        ):
            status, body = w.get(path)
            assert status == 404 and "error" in body, (w.name, path, status, body)

    # 5. /metrics: inputs counted once across workers; outputs and moves match the topics
    moves = await read_all(names, names.car_moves_topic, idle_s=1.0)
    outputs = await read_all(names, names.car_pollution_topic, idle_s=1.0)
    sums = metric_sums([a, b])

    def total(metric: str, **labels: str) -> float:
        return sum(
            v
            for (n, ls), v in sums.items()
            if n == metric and all(dict(ls).get(k) == x for k, x in labels.items())
        )

    assert total("etj_records_in_total", topic=names.car_arrivals_topic) == len(arrivals) + 1
    assert total("etj_records_in_total", topic=names.zones_topic) == len(readings)
    assert total("etj_records_in_total", topic=names.car_moves_topic) == len(moves)
    assert total("etj_car_moves_total") == len(moves)
    assert total("etj_car_pollution_total") == len(outputs)
    assert total("etj_dead_letters_total", topic=names.car_arrivals_topic) == 1
    stats = [w.get("/stats/")[1] for w in (a, b)]
    assert sum(sum(s["car_outputs"].values()) for s in stats) == len(outputs)
    assert all(s["tables"]["car-positions"] > 0 for s in stats)  # RocksDB: an estimate
    mem = stats[1]["rocksdb_memory"]  # b's RocksDB: one budget per worker, in use
    assert 0 < mem["memtables"] <= mem["memtables_budget"] + 64 * 2**20, mem
    assert mem["block_cache"] <= mem["block_cache_budget"], mem
    assert total("etj_rocksdb_memory_bytes", part="memtables") > 0

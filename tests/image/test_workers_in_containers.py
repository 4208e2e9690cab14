"""Worker containers of the built image, run as the chart runs its pods, against the test
broker: they join exactly, survive ``docker kill`` on their volume, restore an empty volume
from snapshots, and stop within the grace period
(docs/operating/image.md#what-the-image-tier-checks).

One scenario, in steps, on one app id: pods ``etj-0`` and ``etj-1`` (each its own volume, read-
only root, the image's user), snapshots in S3 (moto), paced out-of-order traffic of the mood
and the car join. How recovery is told apart from a full replay: Faust logs, at each recovery,
each changelog partition's highwater and the offset its reading starts at (the offset the
partition's RocksDB database holds; -1 without one): tests/image/recovery_log.py.
"""

from __future__ import annotations

import asyncio
import sys
import time

from app.commands.sample_traffic import sample_cars_and_zones, sample_moods_and_events
from app.state.snapshot_store import Snapshots
from tests.faults import processed, send, settle_and_check
from tests.image.checks import car_topics, car_view_is_exact, wait_snapshots
from tests.image.containers import Container, volume_path
from tests.image.recovery_log import DISCARDED, Recovery, first_readings, restored, settled

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(12))


def both_assigned(a: Container, b: Container, topic: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if a.assigned(topic) and b.assigned(topic):
            return
        time.sleep(0.3)
    raise AssertionError(f"partitions not split: {a.assigned(topic)!r} / {b.assigned(topic)!r}")


def recovered(c: Container, timeout_s: float = 120) -> tuple[str, Recovery]:
    """Wait until ``c`` has been given partitions with records and recovered them (a restarted
    pod may be given some only when the killed member's session expires); (its log, what it
    read for each partition the first time)."""
    deadline = time.monotonic() + timeout_s
    while True:
        log = c.log()
        first = first_readings(log)
        if first.from_state and settled(log):
            return log, first
        if time.monotonic() > deadline:
            raise TimeoutError(f"{c.name} recovered nothing from state:\n{log[-3000:]}")
        time.sleep(0.5)


async def test_containers_join_exactly_survive_docker_kill_and_restore_from_snapshots(
    names, containers, s3, snapshot_store
):
    url = snapshot_store(names)
    settings = {"store_url": "rocksdb://", "snapshot_url": url, "snapshot_interval_s": 2}
    snaps = Snapshots(url)
    moods = sample_moods_and_events(
        seed=61, count=300, start_ms=START, late_ratio=0.3, consultants=CONSULTANTS
    )
    cars = sample_cars_and_zones(
        seed=61, count=240, start_ms=START, cars=20, zones=4, late_ratio=0.2
    )
    thirds = [(moods[:100], cars[:80]), (moods[100:200], cars[80:160]), (moods[200:], cars[160:])]

    # 1. two pods of one app id, each on its own new volume; both ready, partitions split
    a = containers(names, "etj-0", s3=s3, **settings)
    b = containers(names, "etj-1", s3=s3, **settings)
    ready_a, ready_b = a.wait_http_ready(), b.wait_http_ready()
    both_assigned(a, b, names.events_topic)

    # 2. the first third of the traffic; every changelog partition gets a snapshot
    sent = await send(names, thirds[0][0], pace_s=0.01)
    await send(names, thirds[0][1], pace_s=0.01, topics=car_topics(names))
    await wait_snapshots(names, snaps)

    # 3. the second third flows; mid-stream, docker kill (SIGKILL) of etj-1
    moods_sending = asyncio.create_task(send(names, thirds[1][0], pace_s=0.03))
    cars_sending = asyncio.create_task(
        send(names, thirds[1][1], pace_s=0.03, topics=car_topics(names))
    )
    await asyncio.sleep(1.0)
    assert await asyncio.to_thread(processed, b) > 0
    assert b.kill() == 137  # 128 + SIGKILL
    assert not moods_sending.done(), "the kill must land while records are still sent"
    # its volume keeps what it wrote: table partition databases and the running marker
    kept = volume_path(b.engine, b.volume)
    assert list(kept.rglob("RUNNING")) and list(kept.rglob("*.db")), sorted(kept.rglob("*"))

    # 4. etj-1 again, a new container on the same volume: the marker says it was killed, so
    # its databases go (app.state.crash_marker) and the newest snapshots come in their place; only the
    # changelog after them is replayed
    b2 = containers(names, "etj-1", volume=b.volume, s3=s3, **settings)
    log, first = await asyncio.to_thread(recovered, b2)
    sent += await moods_sending
    await cars_sending
    assert log.count(DISCARDED) == 1, log[-3000:]
    from_snapshot = restored(log)
    assert from_snapshot, log[-3000:]
    # Faust's reading of each of them started at its snapshot's offset, not at 0
    assert {tp: first.start[tp] for tp in from_snapshot} == from_snapshot, first
    assert first.replayed_total < first.full_replay_total, first
    print(
        f"\nfirst start: ready in {ready_a:.1f} / {ready_b:.1f} s; after docker kill, the "
        f"same volume: {len(from_snapshot)} partitions from snapshots, "
        f"{first.replayed_total} of {first.full_replay_total} changelog records replayed",
        file=sys.stderr,
    )

    # 5. exact: the mood join against the oracle, every record accounted for; the car view
    await settle_and_check(names, moods[:200], sent, [a, b2])
    await car_view_is_exact(names, cars[:160])

    # 6. the image's own HEALTHCHECK (the chart's liveness probe: first check 15 s in)
    for w in (a, b2):
        assert w.wait_healthy(timeout_s=90) > 0

    # 7. docker stop (SIGTERM) of etj-0: exit 0 within the chart's grace period (a contract:
    # before the SIGKILL; 2.2-3.9 s measured against 15 s, a margin of over 3x). Traffic goes
    # on, etj-1 alone handles it (exact); etj-0 again on its volume keeps its RocksDB state (a
    # clean stop: nothing discarded, nothing from a snapshot) and replays only what etj-1
    # wrote meanwhile
    half = len(thirds[2][0]) // 2
    began = time.monotonic()
    assert a.stop() == 0
    took_a = time.monotonic() - began
    assert took_a < a.spec.grace_s, took_a
    sent += await send(names, thirds[2][0][:half], pace_s=0.01)
    await send(names, thirds[2][1][:half], pace_s=0.01, topics=car_topics(names))
    await settle_and_check(names, moods[:200] + thirds[2][0][:half], sent, [b2])
    a2 = containers(names, "etj-0", volume=a.volume, s3=s3, **settings)
    log, first = await asyncio.to_thread(recovered, a2)
    assert DISCARDED not in log and not restored(log), log[-3000:]
    assert first.from_state, first
    assert 0 < first.replayed_total < first.full_replay_total, first
    print(
        f"docker stop: exit 0 in {took_a:.1f} s; the same volume again: "
        f"{len(first.from_state)} partitions from the kept databases, "
        f"{first.replayed_total} of {first.full_replay_total} changelog records replayed",
        file=sys.stderr,
    )

    # 8. etj-1 is replaced by a pod on an empty volume (a new node), once the snapshots cover
    # the changelogs: it restores its partitions from them and is ready without replaying a
    # changelog record
    await wait_snapshots(names, snaps, caught_up=True)
    began = time.monotonic()
    assert b2.stop() == 0
    took_b = time.monotonic() - began
    assert took_b < b2.spec.grace_s, took_b
    c = containers(names, "etj-2", s3=s3, **settings)
    log, first = await asyncio.to_thread(recovered, c)
    assert DISCARDED not in log
    assert restored(log) and first.from_state == set(restored(log)), (restored(log), first)
    assert first.replayed_total == 0, first
    print(
        f"a new pod on an empty volume: {len(restored(log))} partitions from snapshots, "
        f"{first.replayed_total} of {first.full_replay_total} records replayed "
        f"(docker stop of etj-1: {took_b:.1f} s)",
        file=sys.stderr,
    )

    # 9. the rest of the traffic, pods etj-0 and etj-2: still exact
    sent += await send(names, thirds[2][0][half:], pace_s=0.01)
    await send(names, thirds[2][1][half:], pace_s=0.01, topics=car_topics(names))
    revs = await settle_and_check(names, moods, sent, [a2, c])
    await car_view_is_exact(names, cars)
    assert any(r["revision"] > 1 for r in revs), "the scenario must contain corrections"
    for w in (a2, c):
        assert w.stop() == 0

"""The image's other entry points, run as a user runs them: ``docker run IMAGE sample-traffic``,
``join-latest`` and ``snapshots`` (the image's own entrypoint, ``faust -A app.main``), with the
pod's environment, beside a worker container.
"""

from __future__ import annotations

import asyncio
import json

from app.state.snapshot_store import Snapshots
from tests.faults import answers, wait_converged
from tests.harness import read_all
from tests.image.checks import car_view_is_exact, wait_snapshots
from tests.image.containers import tool_args
from tests.oracle import exact_mood_answer, mood_answer

COUNT = 160  # records of sample-traffic: moods and recommendations, car arrivals and readings


async def test_sample_traffic_join_latest_and_snapshots_run_from_the_image(
    names, containers, engine, image, s3, snapshot_store
):
    url = snapshot_store(names)
    w = containers(
        names,
        "etj-0",
        s3=s3,
        store_url="rocksdb://",
        snapshot_url=url,
        snapshot_interval_s=1,
        session_timeout_s=4,
    )
    w.wait_http_ready()

    def tool(*command: str, timeout: float = 120) -> str:
        return engine.run(*tool_args(w.spec, image.tag, *command), timeout=timeout).stdout

    # 1. sample-traffic: out-of-order moods/recommendations and car arrivals/readings
    await asyncio.to_thread(
        tool,
        "sample-traffic",
        "--count",
        str(COUNT),
        "--rate",
        "200",
        "--cars",
        "8",
        "--zones",
        "3",
        "--late-ratio",
        "0.3",
    )
    sent = []
    for kind, topic in (
        ("mood", names.moods_topic),
        ("event", names.events_topic),
        ("car", names.car_arrivals_topic),
        ("zone", names.zones_topic),
    ):
        sent += [(kind, key, value) for key, value in await read_all(names, topic, idle_s=1)]
    assert len(sent) == COUNT and {k for k, _, _ in sent} == {"mood", "event", "car", "zone"}

    # 2. the worker's answer to it is exact (the oracle over what the topics hold)
    moods = [r for r in sent if r[0] in ("mood", "event")]
    expected = exact_mood_answer(moods)
    revs = await wait_converged(names, expected)
    assert answers(revs) == expected
    await car_view_is_exact(names, [r for r in sent if r[0] in ("car", "zone")])

    # 3. join-latest prints the latest revision of each join id: the exact answer
    out = await asyncio.to_thread(tool, "join-latest", "moods")
    printed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert {r["id"]: mood_answer(r) for r in printed} == expected

    # 4. snapshots lists what the store holds (once it covers the changelogs)
    await wait_snapshots(names, Snapshots(url), caught_up=True)
    listed = [
        json.loads(line)
        for line in (await asyncio.to_thread(tool, "snapshots", "--json")).splitlines()
    ]
    held = Snapshots(url).list()
    assert held and sorted(
        (m["table"], m["partition"], m["offset"], m["id"]) for m in listed
    ) == sorted((m.table, m.partition, m.offset, m.id) for m in held)
    assert w.stop() == 0

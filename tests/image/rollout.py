"""A StatefulSet rollout, measured: two worker containers under live traffic, each restarted in
turn as Kubernetes' rolling update restarts a pod; the answers exact, and how long a partition
went unanswered and the views answered 503 (tests/image/test_rolling_restart.py and
``bench.rolling_restart``; docs/operating/scaling.md#rolling-restarts).

The rollout: pods ``etj-0`` and ``etj-1`` of the chart, each on its own volume, both ready, the
mood join's paced traffic (moods and events, out of order, to every partition) flowing
throughout. Then, as a StatefulSet's RollingUpdate does, from the highest ordinal down: SIGTERM
to the pod (``docker stop``, the chart's grace period), wait for it to exit, start the same pod
again (its name, DNS name, web port and volume: its claim), and wait for its readiness probe to
answer 200 before the next pod. The traffic goes on for ``tail_s`` after the last pod is ready;
then the answers must be exact (tests/oracle.py, through tests/faults.py's checks).

What is measured, in wall-clock seconds (the containers share the host's clock, so the Kafka
timestamps the producer and the workers write are comparable):

- **the gap** (``gap_s``, ``make bench``'s ``rolling_restart_gap_s``): an event's *answer* is
  the timestamp of the first revision that carries its join id. An input partition p *has no
  answer* between two consecutive answers to p's events when an event of p was sent between
  them: p's inputs kept arriving and none was answered. Its gap is the longest such interval;
  ``gap_s`` is the largest over the partitions, from the first SIGTERM to the end of the
  traffic. ``steady_gap_s`` is the same before the first SIGTERM: the floor the traffic's pace
  sets (each partition gets an event every ~0.3 s).
- **readiness** (``ready_503_s``): seconds a pod the rollout was not restarting (its process
  up, ready before) answered ``/ready/`` other than 200, summed over the pods: the time a pod
  nobody touched left the Service's endpoints. ``/ready/`` is asked every ``probe_s``.
- **the views** (``view_503_s``): one key per partition, asked every ``probe_s`` through "the
  Service" (a pod whose last ``/ready/`` was 200, in turn; none ready: no answer); the longest
  stretch any key went without an answer (200, or 404 for a key with nothing yet).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from app.commands.sample_traffic import sample_moods_and_events
from app.kafka.partitioner import partition_for
from tests.faults import Sent, settle_and_check, topic_of
from tests.harness import Names, bootstrap, encode
from tests.image.containers import Container
from tests.oracle import Recommendation

START = 1_790_000_000_000
CONSULTANTS = tuple(f"c{i}" for i in range(12))
#: the pods of a two-replica StatefulSet, in the order its RollingUpdate restarts them
ROLLOUT_ORDER = ("etj-1", "etj-0")

#: ``start(pod, volume, web_port)``: a container playing ``pod``; ``volume`` None makes a new
#: claim, ``web_port`` None a new port (a restarted pod keeps both)
Start = Callable[[str, str | None, int | None], Container]


@dataclass
class Rollout:
    """What one rollout measured (module doc), and what it was."""

    gap_s: float
    steady_gap_s: float
    ready_503_s: float
    view_503_s: float
    gap_by_partition: dict[int, float]
    #: pod -> (seconds from SIGTERM to exit, from SIGTERM to the new pod's /ready/ 200)
    restarts: dict[str, tuple[float, float]]
    records: int
    #: pod -> "Worker ready" lines in the log of the pod the rollout did not restart, while it
    #: restarted the other one: each is a rebalance it went through
    rebalances_seen: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        restarts = ", ".join(
            f"{pod} exit {down:.1f} s, ready {up:.1f} s after SIGTERM"
            for pod, (down, up) in self.restarts.items()
        )
        return (
            f"rolling restart of 2 pods, {self.records} records: longest gap {self.gap_s:.1f} s "
            f"(steady {self.steady_gap_s:.1f} s; by partition "
            f"{ {p: round(g, 1) for p, g in sorted(self.gap_by_partition.items())} }), "
            f"/ready/ 503 {self.ready_503_s:.1f} s, views without an answer {self.view_503_s:.1f}"
            f" s at most; {restarts}; rebalances seen by the other pod {self.rebalances_seen}"
        )


# --- traffic --------------------------------------------------------------------------------


async def paced_traffic(
    names: Names, records: list[tuple[str, Any, Any]], pace_s: float, stop: asyncio.Event
) -> list[tuple[Sent, float]]:
    """Send ``records`` in order, one every ``pace_s``, until ``stop``; each as the broker
    stored it, with the time its send was acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(names), **names.client_auth())
    await producer.start()
    out: list[tuple[Sent, float]] = []
    try:
        for kind, key, value in records:
            if stop.is_set():
                break
            topic = topic_of(names, kind)
            meta = await producer.send_and_wait(topic, encode(value), key=encode(key))
            out.append((Sent(kind, key, value, topic, meta.partition, meta.offset), time.time()))
            await asyncio.sleep(pace_s)
        else:
            raise AssertionError(f"the traffic ran out ({len(records)} records): make more")
    finally:
        await producer.stop()
    return out


async def first_answers(names: Names, idle_s: float = 2.0) -> dict[str, float]:
    """join id -> when its first revision was sent (its Kafka timestamp, in seconds)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(names),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **names.client_auth(),
    )
    await consumer.start()
    out: dict[str, float] = {}
    try:
        topic = names.output_topic
        await consumer.topics()
        parts = consumer.partitions_for_topic(topic) or set()
        consumer.assign([TopicPartition(topic, p) for p in parts])
        await consumer.seek_to_beginning()
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for msgs in (await consumer.getmany(timeout_ms=300)).values():
                for m in msgs:
                    jid = json.loads(m.value)["id"]
                    out[jid] = min(out.get(jid, float("inf")), m.timestamp / 1000)
                    last = time.monotonic()
    finally:
        await consumer.stop()
    return out


def longest_unanswered(
    answers: list[float], arrivals: list[float], since: float, until: float
) -> float:
    """The longest interval between consecutive ``answers`` (sorted) in which one of
    ``arrivals`` fell, counting intervals that end after ``since`` and begin before ``until``."""
    longest = 0.0
    j = 0
    for a, b in zip(answers, answers[1:], strict=False):
        while j < len(arrivals) and arrivals[j] <= a:
            j += 1
        arrived = j < len(arrivals) and arrivals[j] < b
        if arrived and b > since and a < until:
            longest = max(longest, b - a)
    return longest


def gaps(
    sent: list[tuple[Sent, float]], answered: dict[str, float], since: float, until: float
) -> dict[int, float]:
    """Input partition -> its gap (module doc) between ``since`` and ``until``."""
    by_partition: dict[int, tuple[list[float], list[float]]] = {}
    for s, at in sent:
        if s.kind != "event":
            continue
        v = s.value
        jid = Recommendation(v["consultant"], v["recommendation"], v["event_time"], v.get("id"))
        answers, arrivals = by_partition.setdefault(s.partition, ([], []))
        arrivals.append(at)
        if jid.join_id in answered:
            answers.append(answered[jid.join_id])
    return {
        p: longest_unanswered(sorted(answers), sorted(arrivals), since, until)
        for p, (answers, arrivals) in by_partition.items()
    }


# --- what the pods answer while it happens ---------------------------------------------------


def one_key_per_partition(partitions: int) -> dict[int, str]:
    keys: dict[int, str] = {}
    for name in CONSULTANTS:
        keys.setdefault(partition_for(name.encode(), partitions), name)
    assert len(keys) == partitions, f"the consultants reach partitions {sorted(keys)} only"
    return keys


class Probe(threading.Thread):
    """Asks every pod's ``/ready/`` and each key's view every ``every_s`` (module doc)."""

    def __init__(self, pods: dict[str, Container], keys: dict[int, str], every_s: float) -> None:
        super().__init__(daemon=True, name="rollout-probe")
        self.pods, self.keys, self.every_s = pods, keys, every_s
        self.ready: dict[str, list[tuple[float, int]]] = {pod: [] for pod in pods}
        self.views: dict[int, list[tuple[float, int]]] = {p: [] for p in keys}
        self.halt = threading.Event()

    def run(self) -> None:
        turn = 0
        while not self.halt.is_set():
            began = time.monotonic()
            serving = []
            for pod, c in list(self.pods.items()):
                status = c.get(c.spec.probes["readinessProbe"], timeout_s=1.0)[0]
                self.ready[pod].append((time.time(), status))
                if status == 200:
                    serving.append(c)
            for p, key in self.keys.items():
                status = 0
                if serving:
                    turn += 1
                    status = serving[turn % len(serving)].get(f"/moods/{key}/", timeout_s=2.0)[0]
                self.views[p].append((time.time(), status))
            self.halt.wait(max(0.0, self.every_s - (time.monotonic() - began)))

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)


def not_ready_s(samples: list[tuple[float, int]], restarting: list[tuple[float, float]]) -> float:
    """Seconds of ``samples`` (time, status) answered other than 200 after the first 200,
    outside the ``restarting`` windows (each sample stands until the next)."""
    total, seen_ready = 0.0, False
    for (t, status), (t_next, _) in zip(samples, samples[1:], strict=False):
        seen_ready = seen_ready or status == 200
        if seen_ready and status != 200 and not any(a <= t <= b for a, b in restarting):
            total += t_next - t
    return total


def longest_unanswered_view(samples: list[tuple[float, int]]) -> float:
    """The longest stretch of ``samples`` (time, status) from a failed answer to the next
    answer (200, or 404: nothing for the key yet)."""
    longest, failing_since = 0.0, None
    for t, status in samples:
        if status in (200, 404):
            if failing_since is not None:
                longest = max(longest, t - failing_since)
            failing_since = None
        elif failing_since is None:
            failing_since = t
    if failing_since is not None and samples:
        longest = max(longest, samples[-1][0] - failing_since)
    return longest


# --- the rollout ----------------------------------------------------------------------------


def wait_split(a: Container, b: Container, topic: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not (a.assigned(topic) and b.assigned(topic)):
        if time.monotonic() > deadline:
            raise AssertionError(f"not split: {a.assigned(topic)!r} / {b.assigned(topic)!r}")
        time.sleep(0.3)


async def rolling_restart(
    start: Start,
    names: Names,
    partitions: int = 4,
    warm_s: float = 15.0,
    tail_s: float = 15.0,
    pace_s: float = 0.05,
    probe_s: float = 0.25,
    seed: int = 59,
    record: Path | None = None,
) -> Rollout:
    """Run the rollout (module doc) and check the answers; what it measured. ``record``: a
    JSON file for every observation the figures come from (sends, first answers, probes)."""
    records = sample_moods_and_events(
        seed=seed, count=8000, start_ms=START, step_ms=200, late_ratio=0.2, consultants=CONSULTANTS
    )
    pods = {pod: start(pod, None, None) for pod in sorted(ROLLOUT_ORDER)}
    for c in pods.values():
        await asyncio.to_thread(c.wait_http_ready, 120)
    await asyncio.to_thread(wait_split, pods["etj-0"], pods["etj-1"], names.events_topic)
    probe = Probe(pods, one_key_per_partition(partitions), probe_s)
    stop = asyncio.Event()
    traffic = asyncio.create_task(paced_traffic(names, records, pace_s, stop))
    restarting: dict[str, list[tuple[float, float]]] = {pod: [] for pod in pods}
    restarts: dict[str, tuple[float, float]] = {}
    rebalances: dict[str, int] = {}
    probe.start()
    try:
        await asyncio.sleep(warm_s)
        first_sigterm = time.time()
        for pod in ROLLOUT_ORDER:
            old = pods[pod]
            other = next(c for p, c in pods.items() if p != pod)
            seen = other.ready_count()
            began = time.time()
            code = await asyncio.to_thread(old.stop)
            assert code == 0, f"{old.name} exited {code}:\n{old.log()[-3000:]}"
            down = time.time() - began
            new = start(pod, old.volume, old.web_port)
            pods[pod] = new
            await asyncio.to_thread(new.wait_http_ready, 120)
            restarting[pod].append((began, time.time()))
            restarts[pod] = (down, time.time() - began)
            rebalances[other.pod] = other.ready_count() - seen
        await asyncio.sleep(tail_s)
    finally:
        stop.set()
        sent = await traffic
        probe.stop()
    until = time.time()
    await settle_and_check(
        names,
        [(s.kind, s.key, s.value) for s, _ in sent],
        [s for s, _ in sent],
        list(pods.values()),
    )
    answered = await first_answers(names)
    if record is not None:
        record.write_text(
            json.dumps(
                {
                    "sent": [[s.kind, s.partition, s.value, at] for s, at in sent],
                    "answered": answered,
                    "ready": probe.ready,
                    "views": probe.views,
                    "restarting": restarting,
                    "first_sigterm": first_sigterm,
                    "until": until,
                }
            )
        )
    rollout_gaps = gaps(sent, answered, first_sigterm, until)
    # before the first SIGTERM: the intervals that end before it
    steady = gaps(
        [(s, at) for s, at in sent if at < first_sigterm - 2], answered, 0.0, first_sigterm - 2
    )
    return Rollout(
        gap_s=max(rollout_gaps.values()),
        steady_gap_s=max(steady.values()),
        ready_503_s=sum(not_ready_s(probe.ready[p], restarting[p]) for p in pods),
        view_503_s=max(longest_unanswered_view(s) for s in probe.views.values()),
        gap_by_partition=rollout_gaps,
        restarts=restarts,
        records=len(sent),
        rebalances_seen=rebalances,
    )

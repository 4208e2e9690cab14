"""Join throughput of one worker ÷ a raw aiokafka consume→produce pipe: same records, same run.

Both read the same backlog (moods + recommendations already in the broker) and write to their
own output topic:
- the pipe forwards every record's bytes; per fetched batch it sends all, waits for the acks,
  then commits (at-least-once, the least a Kafka worker in Python must do);
- the worker joins (validation, state, changelog, revisions, dead letters ...).
Rate = input records ÷ seconds from the first output to the moment all inputs are consumed
(the worker's ``records_in`` on /stats/, polled every 50 ms), so the group join and table
recovery at start are not counted. The pipe runs twice, once with the producer settings the
worker uses (``max_batch_size=1``, needed by tansu for exact changelogs) and once with
aiokafka's defaults — the latter is the physical limit; the ratio is against the former.

``python -m bench.throughput [--records N] [--runs R]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bench.kafka_io import assign_all, create_topics, jbytes, produce_bulk, read_topics
from bench.workers import bench_broker, new_names, start_worker, wait_stats, workdir

GOAL = 0.5
START_MS = 1_790_000_000_000


def workload(records: int, consultants: int, seed: int) -> list[tuple[str, str, dict]]:
    """Out-of-order moods and recommendations (``sample-traffic``'s generator), arrival order."""
    from app.commands.sample_traffic import sample_moods_and_events

    names = tuple(f"c{i:05d}" for i in range(consultants))
    return sample_moods_and_events(seed=seed, count=records, start_ms=START_MS, step_ms=100,
                                   late_ratio=0.1, consultants=names)


async def load_inputs(bootstrap: str, names: Any, records: list[tuple[str, str, dict]],
                      partitions: int) -> None:
    topic = {"mood": names.moods_topic, "event": names.events_topic}
    await create_topics(bootstrap, [names.moods_topic, names.events_topic], partitions)
    await produce_bulk(bootstrap, ((topic[k], key.encode(), jbytes(v)) for k, key, v in records),
                       partitions)


async def raw_pipe(bootstrap: str, inputs: list[str], output: str, expected: int,
                   group: str, max_batch_size: int | None, timeout_s: float = 300) -> float:
    """Forward ``expected`` records from ``inputs`` to ``output``; seconds first fetch → done."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    extra = {} if max_batch_size is None else {"max_batch_size": max_batch_size}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **extra)
    await consumer.start()
    await producer.start()
    try:
        await assign_all(consumer, inputs)
        done, t0 = 0, None
        deadline = time.monotonic() + timeout_s
        while done < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            if not batch:
                continue
            if t0 is None:
                t0 = time.monotonic()
            acks = [await producer.send(output, m.value, key=m.key)
                    for msgs in batch.values() for m in msgs]
            await asyncio.gather(*acks)  # outputs durable before the offsets are committed
            await consumer.commit({tp: msgs[-1].offset + 1 for tp, msgs in batch.items()})
            done += len(acks)
        if done < expected:
            raise TimeoutError(f"raw pipe forwarded {done} of {expected}")
        return time.monotonic() - (t0 or time.monotonic())
    finally:
        await producer.stop()
        await consumer.stop()


def time_worker(broker: Any, names: Any, expected: int, folder: Any,
                timeout_s: float = 600) -> dict[str, Any]:
    """Start a worker on the backlog; seconds from its first output to all inputs consumed."""
    w = start_worker(names, folder, name="throughput")
    try:
        w.wait_ready(timeout_s=120)
        t_end, s = wait_stats(w, lambda s: sum(s["records_in"].values()) >= expected,
                              timeout_s=timeout_s, every_s=0.05)
        outs = asyncio.run(read_topics(broker.bootstrap, [names.output_topic],
                                       until=lambda got: False, timeout_s=60, idle_s=1.0))
    finally:
        w.stop()
    if not outs:
        raise RuntimeError("the worker emitted no revision")
    t_first = min(o.timestamp_ms for o in outs) / 1000
    t_last = max(o.timestamp_ms for o in outs) / 1000
    seconds = max(t_end, t_last) - t_first
    return {"seconds": seconds, "revisions": len(outs),
            "corrections": sum(1 for o in outs if (o.json() or {}).get("revision", 1) > 1)}


def one_run(records: int, consultants: int, seed: int, partitions: int) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker, partitions=partitions)
        data = workload(records, consultants, seed)
        asyncio.run(load_inputs(broker.bootstrap, names, data, partitions))
        inputs = [names.moods_topic, names.events_topic]
        pipe_same_s = asyncio.run(raw_pipe(broker.bootstrap, inputs, names.prefix + "-pipe1",
                                           records, names.prefix + "-pipe1", 1))
        pipe_default_s = asyncio.run(raw_pipe(broker.bootstrap, inputs, names.prefix + "-pipe2",
                                              records, names.prefix + "-pipe2", None))
        worker = time_worker(broker, names, records, folder)
    pipe_rate = records / pipe_same_s
    worker_rate = records / worker["seconds"]
    return {"records": records, "pipe_rate": pipe_rate,
            "pipe_default_batching_rate": records / pipe_default_s,
            "worker_rate": worker_rate, "ratio": worker_rate / pipe_rate,
            "ratio_vs_default_batching": worker_rate / (records / pipe_default_s),
            "revisions": worker["revisions"], "corrections": worker["corrections"]}


def run(records: int = 20_000, runs: int = 3, consultants: int = 1_000, seed: int = 1,
        partitions: int = 4) -> dict[str, Any]:
    """Median figures over ``runs`` runs (each on a fresh broker)."""
    results = [one_run(records, consultants, seed + i, partitions) for i in range(runs)]
    med = {k: statistics.median(r[k] for r in results) for k in results[0]}
    return {"name": "throughput", "records": records, "consultants": consultants,
            "partitions": partitions, "runs": runs,
            "worker_rate": round(med["worker_rate"]), "pipe_rate": round(med["pipe_rate"]),
            "pipe_default_batching_rate": round(med["pipe_default_batching_rate"]),
            "ratio": round(med["ratio"], 3),
            "ratio_vs_default_batching": round(med["ratio_vs_default_batching"], 3),
            "goal": GOAL, "goal_met": med["ratio"] >= GOAL,
            "each_run": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                         for r in results]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--consultants", type=int, default=1_000)
    a = p.parse_args(argv)
    print(json.dumps(run(a.records, a.runs, a.consultants), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

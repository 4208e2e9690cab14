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

Then, on a larger backlog of its own (``batched_records``, 100,000: a worker that handles tens
of thousands of records a second needs seconds of input to be timed), a second worker (its own
app id) reads with the producer's default batching (``ETJ_PRODUCER_MAX_BATCH_SIZE`` unset), as
does the pipe: ``batched_ratio`` = its rate ÷ the default-batching pipe's. ``sends_per_record`` comes from the first worker's run: the records
it wrote (changelogs, output, dead letters, late), counted at the broker, ÷ input records.
The inputs are loaded with batching (``produce_bulk``) for every run; loading is not timed.

``python -m bench.throughput [--records N] [--runs R]``
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bench.harness import Bench, Figure, each_run, medians
from bench.workers import bench_broker, new_names, time_to_last_output, workdir
from tests.harness import batched
from tests.kafka_io import assign_all, create_topics, jbytes, list_topics, produce_bulk, topic_sizes

RATIO = Figure("throughput_ratio", "ratio", 0.8, note="worker ÷ raw pipe, one-record batches both")
RPS = Figure("throughput_rps", "worker_rate", unit="records/s", note="one-record batches")
BATCHED_RPS = Figure(
    "throughput_batched_rps",
    "worker_batched_rate",
    45_000,
    unit="records/s",
    note="default batching",
)
BATCHED_RATIO = Figure(
    "throughput_batched_ratio",
    "batched_ratio",
    0.65,
    note="worker ÷ raw pipe, default batching both",
)
SENDS = Figure(
    "sends_per_record",
    goal=2,
    direction="<=",
    note="records the worker wrote ÷ read, one-record batches (at the broker)",
)
START_MS = 1_790_000_000_000


def workload(records: int, consultants: int, seed: int) -> list[tuple[str, str, dict]]:
    """Out-of-order moods and recommendations (``sample-traffic``'s generator), arrival order."""
    from app.commands.sample_traffic import sample_moods_and_events

    names = tuple(f"c{i:05d}" for i in range(consultants))
    return sample_moods_and_events(
        seed=seed, count=records, start_ms=START_MS, step_ms=100, late_ratio=0.1, consultants=names
    )


async def load_inputs(
    bootstrap: str, names: Any, records: list[tuple[str, str, dict]], partitions: int
) -> None:
    topic = {"mood": names.moods_topic, "event": names.events_topic}
    await create_topics(bootstrap, [names.moods_topic, names.events_topic], partitions)
    await produce_bulk(
        bootstrap, ((topic[k], key.encode(), jbytes(v)) for k, key, v in records), partitions
    )


async def raw_pipe(
    bootstrap: str,
    inputs: list[str],
    output: str,
    expected: int,
    group: str,
    max_batch_size: int | None,
    timeout_s: float = 300,
) -> float:
    """Forward ``expected`` records from ``inputs`` to ``output``; seconds first fetch → done."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
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
            acks = [
                await producer.send(output, m.value, key=m.key)
                for msgs in batch.values()
                for m in msgs
            ]
            await asyncio.gather(*acks)  # outputs durable before the offsets are committed
            await consumer.commit({tp: msgs[-1].offset + 1 for tp, msgs in batch.items()})
            done += len(acks)
        if done < expected:
            raise TimeoutError(f"raw pipe forwarded {done} of {expected}")
        return time.monotonic() - (t0 or time.monotonic())
    finally:
        await producer.stop()
        await consumer.stop()


def time_worker(
    broker: Any,
    names: Any,
    expected: int,
    folder: Any,
    name: str = "throughput",
    timeout_s: float = 600,
) -> dict[str, Any]:
    """Start a worker on the backlog; seconds from its first output to all inputs consumed."""
    t = time_to_last_output(
        names,
        folder,
        [names.moods_topic, names.events_topic],
        expected,
        [names.output_topic],
        broker.bootstrap,
        name=name,
        timeout_s=timeout_s,
    )
    outs = t["outputs"]
    final = t["stats"][0] if t.get("stats") else {}
    return {
        "seconds": t["seconds"],
        "revisions": len(outs),
        "corrections": sum(1 for o in outs if (o.json() or {}).get("revision", 1) > 1),
        "late": int(sum((final.get("late") or {}).values())),
        "dead_letters": int(sum((final.get("dead_letters") or {}).values())),
    }


async def sends_per_record(bootstrap: str, names: Any, records: int) -> dict[str, Any]:
    """What the worker wrote, counted at the broker: records in its changelogs
    (``<app id>-<table>-changelog``) and its output, dead-letter and late topics, ÷ input
    records. Exact only with one-record producer batches (tansu's end offsets). The revisit
    ticks it sends to itself are listed beside it, not counted (a timer, not per record)."""
    app_id = names.env["ETJ_APP_ID"]
    changelogs = sorted(
        t
        for t in await list_topics(bootstrap)
        if t.startswith(app_id + "-") and t.endswith("-changelog")
    )
    outputs = [names.output_topic, names.dead_letter_topic, names.late_topic]
    sizes = await topic_sizes(bootstrap, changelogs + outputs + [names.ticks_topic])
    counted = sum(sizes[t] for t in changelogs + outputs)
    return {
        "sends_per_record": counted / records,
        "sends": counted,
        "sends_by_topic": {t.removeprefix(names.prefix + "-"): n for t, n in sizes.items()},
    }


def one_run(
    records: int, consultants: int, seed: int, partitions: int, batched_records: int
) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        # 1. one-record producer batches, both sides: `records` records
        names = new_names(broker, partitions=partitions)
        data = workload(records, consultants, seed)
        asyncio.run(load_inputs(broker.bootstrap, names, data, partitions))
        inputs = [names.moods_topic, names.events_topic]
        pipe_same_s = asyncio.run(
            raw_pipe(
                broker.bootstrap,
                inputs,
                names.prefix + "-pipe1",
                records,
                names.prefix + "-pipe1",
                1,
            )
        )
        worker = time_worker(broker, names, records, folder)
        sends = asyncio.run(sends_per_record(broker.bootstrap, names, records))
        if not batched_records:  # the one-record run only (``--batched-records 0``)
            return _one_record_figures(records, pipe_same_s, worker, sends)
        # 2. the producer's default batching, both sides, on a backlog of its own (a second
        # app id, as it would run on Kafka): `batched_records`, long enough to time a worker
        # that handles tens of thousands of records a second
        big = new_names(broker, partitions=partitions)
        asyncio.run(
            load_inputs(
                broker.bootstrap,
                big,
                workload(batched_records, consultants, seed + 1000),
                partitions,
            )
        )
        big_inputs = [big.moods_topic, big.events_topic]
        pipe_default_s = asyncio.run(
            raw_pipe(
                broker.bootstrap,
                big_inputs,
                big.prefix + "-pipe2",
                batched_records,
                big.prefix + "-pipe2",
                None,
            )
        )
        worker_batched = time_worker(broker, batched(big), batched_records, folder, name="batched")
    pipe_default_rate = batched_records / pipe_default_s
    batched_rate = batched_records / worker_batched["seconds"]
    return {
        **_one_record_figures(records, pipe_same_s, worker, sends),
        "batched_records": batched_records,
        "pipe_default_batching_rate": pipe_default_rate,
        "worker_batched_rate": batched_rate,
        "batched_ratio": batched_rate / pipe_default_rate,
        "batched_revisions": worker_batched["revisions"],
        "batched_corrections": worker_batched["corrections"],
        "batched_late": worker_batched["late"],
        "batched_dead_letters": worker_batched["dead_letters"],
    }


def _one_record_figures(
    records: int, pipe_same_s: float, worker: dict[str, Any], sends: dict[str, Any]
) -> dict[str, Any]:
    """The figures of the one-record-batch part of a run."""
    pipe_rate = records / pipe_same_s
    worker_rate = records / worker["seconds"]
    return {
        "records": records,
        "pipe_rate": pipe_rate,
        "worker_rate": worker_rate,
        "ratio": worker_rate / pipe_rate,
        "sends_per_record": sends["sends_per_record"],
        "sends": sends["sends"],
        "sends_by_topic": sends["sends_by_topic"],
        "revisions": worker["revisions"],
        "corrections": worker["corrections"],
        "late": worker["late"],
        "dead_letters": worker["dead_letters"],
    }


def run(
    records: int = 10_000,
    runs: int = 3,
    consultants: int = 1_000,
    seed: int = 1,
    partitions: int = 4,
    batched_records: int = 100_000,
) -> dict[str, Any]:
    """Median figures over ``runs`` runs (each on a fresh broker)."""
    results = [
        one_run(records, consultants, seed + i, partitions, batched_records) for i in range(runs)
    ]
    med = medians(results)
    out = {
        "name": "throughput",
        "records": records,
        "batched_records": batched_records,
        "consultants": consultants,
        "partitions": partitions,
        "runs": runs,
        "worker_rate": round(med["worker_rate"]),
        "pipe_rate": round(med["pipe_rate"]),
        "ratio": round(med["ratio"], 3),
        "goal": RATIO.goal,
        "goal_met": RATIO.met(med["ratio"]),
        # from the one-record-batch run (exact end offsets)
        "sends_per_record": round(med["sends_per_record"], 3),
        "sends_by_topic": results[0]["sends_by_topic"],
        "each_run": each_run(results),
    }
    if batched_records:
        # both sides with the producer's default batching (the worker: no
        # ETJ_PRODUCER_MAX_BATCH_SIZE; the pipe: aiokafka's defaults)
        out |= {
            "pipe_default_batching_rate": round(med["pipe_default_batching_rate"]),
            "worker_batched_rate": round(med["worker_batched_rate"]),
            "batched_ratio": round(med["batched_ratio"], 3),
            "batched_goal": BATCHED_RATIO.goal,
            "batched_goal_rps": BATCHED_RPS.goal,
        }
    return out


def report(t: dict[str, Any]) -> str:
    out = (
        f"throughput, one-record batches both: worker {t['worker_rate']}/s ÷ raw pipe "
        f"{t['pipe_rate']}/s = {t['ratio']}"
    )
    if "worker_batched_rate" in t:
        out += (
            f"\nthroughput, default batching both: worker {t['worker_batched_rate']}/s ÷ "
            f"pipe {t['pipe_default_batching_rate']}/s = {t['batched_ratio']}; sends per "
            f"record {t['sends_per_record']} (one-record run, counted at the broker)"
        )
    return out


BENCH = Bench(
    "throughput",
    run,
    (RATIO, RPS, BATCHED_RPS, BATCHED_RATIO, SENDS),
    report=report,
    # one-record batches on 10,000 records; default batching on 100,000 (a worker at tens of
    # thousands of records a second needs seconds of backlog to be timed)
    suite=lambda quick, runs: {
        "records": 3_000 if quick else 10_000,
        "runs": runs,
        "batched_records": 20_000 if quick else 100_000,
    },
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())

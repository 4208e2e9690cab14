"""The per-record cost of a worker's own code, without a broker: µs per input record.

A real worker's rate mixes etj's code with the broker client, Faust and the machine's load;
this drives the same code a worker runs on a backlog — one ``moods`` loop's
:meth:`~app.loop.durable.DurableLoop.handle` (parse, door, flow control, engine, state) and
:meth:`~app.loop.pipeline.DeliveryPipeline.hand_over` (overlay flush, changelog rows and
outputs built into aiokafka's batch builders) — in one process, over the memory store (the
worker's default), with a producer whose every send is at once "in the broker". What is left
out: fetching (the consumer thread), the broker's round trips and the acks' consumer calls.

It counts work, so it compares two versions of the code on a noisy shared machine better than a
worker's rate does: run both, quote the ratio (and ``--profile`` for cProfile's call counts and
where the time goes).

``python -m bench.kernel [--records N] [--fetch N] [--profile] [--shaped] [--hot-key]
[--catalogue N] [--store rocksdb] [--callgrind]``; ``--hot-key``: bench.hot_key's workload (one
key); ``--shaped`` runs a ``ETJ_JOINS_FILE`` spec whose sides use dotted paths, an ISO-8601
time and a ``$timestamp`` side (the spec features the fast path must keep); ``--catalogue N``:
the movies join replaying bench.bootstrap's catalogue of N movies (one version each, no
ratings: the 1M-movie replay without a broker); ``--store rocksdb``: the tables in RocksDB, as
that replay runs (a fresh folder); ``--callgrind``: run under ``valgrind --tool=callgrind
--instr-atstart=no`` (``bench.instructions`` does), instructions counted only while the
records are handled (the marker library of ``bench.instructions``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import tempfile
import time
from collections import namedtuple
from pathlib import Path
from typing import Any
from unittest import mock

#: what the consumer hands a loop: aiokafka's ConsumerRecord, the fields the loop reads
Record = namedtuple("Record", "topic partition offset key value timestamp headers", defaults=((),))

START_MS = 1_790_000_000_000

#: a spec whose sides are shaped otherwise (docs/joins/declarative.md#records-shaped-otherwise)
SHAPED_SPEC = {
    "name": "shaped",
    "events": {
        "topic": "kernel-events",
        "key": "user.id",
        "time": "meta.at",
        "time_format": "iso8601",
        "id": "id",
        "fields": {"id": "str", "user.id": "str", "item": "str", "meta.at": "time"},
        "copy": ["user.id", "item", {"meta.at": "at"}],
    },
    "dimension": {
        "topic": "kernel-tiers",
        "key": "user",
        "time": "$timestamp",
        "fields": {"user": "str", "tier": "str"},
        "copy": ["tier"],
        "time_as": "tier_time",
    },
    "output": "kernel-out",
    "ticks": "kernel-ticks",
    "retention_ms": 86_400_000,
}


def workload(records: int, consultants: int, seed: int) -> list[tuple[str, str, dict]]:
    from app.commands.sample_traffic import sample_moods_and_events

    names = tuple(f"c{i:05d}" for i in range(consultants))
    return sample_moods_and_events(
        seed=seed, count=records, start_ms=START_MS, step_ms=100, late_ratio=0.1, consultants=names
    )


def shaped(data: list[tuple[str, str, dict]]) -> list[tuple[str, str, dict]]:
    """The same traffic in :data:`SHAPED_SPEC`'s shape (nested key, ISO time)."""
    import datetime as dt

    out = []
    for kind, key, v in data:
        if kind == "mood":
            out.append((kind, key, {"user": key, "tier": v["mood"], "_ts": v["event_time"]}))
        else:
            at = dt.datetime.fromtimestamp(v["event_time"] / 1000, dt.UTC)
            out.append(
                (
                    kind,
                    key,
                    {
                        "id": v["id"],
                        "user": {"id": key},
                        "item": v["recommendation"],
                        "meta": {
                            "at": at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
                        },
                        "_at": v["event_time"],
                    },
                )
            )
    return out


def catalogue(movies: int) -> list[tuple[str, str, dict]]:
    """bench.bootstrap's catalogue (its first ``movies`` movies) as movie versions."""
    from bench.bootstrap import catalogue_rows

    return [
        ("mood", mid, {"movie_id": mid, "title": title, "event_time": t, "_ts": t + 3_000})
        for mid, title, t in catalogue_rows(movies)
    ]


def flat(data: list[tuple[str, str, dict]]) -> list[tuple[str, str, dict]]:
    return [(kind, key, {**v, "_at": v["event_time"]}) for kind, key, v in data]


def batches(
    engine: Any, data: list[tuple[str, str, dict]], partitions: int, fetch: int, tick_every: int
) -> list[list[Any]]:
    """The records as the consumer would hand them: per turn, one batch of at most ``fetch``
    records per input partition; every ``tick_every`` turns (0: never) and after the last, a
    tick of each partition: the revisit a worker's timer sends every 5 s, which purges what is
    behind the horizon and reviews the joins near the stream time (a tenth of a worker's main
    thread on bench.throughput's backlog). 50 turns are ~200,000 records, a worker's 5 s at
    40,000 records/s."""
    from murmurhash2 import murmurhash2

    from app.faust_app import app
    from app.inputs.inbox import Batch
    from app.kafka.partitioner import SEED

    topics = {"mood": engine.spec.dimension.input, "event": engine.spec.events.input}
    per: dict[tuple[str, int], list[Any]] = {}
    for kind, key, value in data:
        k = key.encode()
        p = (murmurhash2(k, SEED) & 0x7FFFFFFF) % partitions
        # the Kafka timestamp: the producer's clock, a little after the event (a
        # ``$timestamp`` side's event time itself)
        ts = value.pop("_ts", None) or value.pop("_at") + 3_000
        q = per.setdefault((topics[kind], p), [])
        q.append(Record(topics[kind], p, len(q), k, json.dumps(value).encode(), ts))
    turns: list[list[Any]] = []
    i = ticked = 0
    ticks = engine.spec.ticks

    def tick() -> list[Any]:
        return [
            Batch(
                ticks,
                p,
                [Record(ticks, p, ticked, None, b"", 0)],
                ticked + 1,
                app.consumer_generation_id,
            )
            for p in range(partitions)
        ]

    while True:
        turn = [
            Batch(t, p, q[i : i + fetch], len(q), app.consumer_generation_id)
            for (t, p), q in sorted(per.items())
            if q[i : i + fetch]
        ]
        if not turn:
            if tick_every:
                turns.append(tick())
            return turns
        if tick_every and turns and len(turns) % tick_every == 0:
            turn += tick()
            ticked += 1
        turns.append(turn)
        i += fetch


class FakeProducer:
    """aiokafka's producer as the batch path sees it: every batch at once in the broker."""

    _max_request_size = 1_048_576

    class _Acc:
        _compression_type = 0

    _message_accumulator = _Acc()

    def __init__(self) -> None:
        self.records: dict[str, int] = {}

    async def send_batch(self, builder: Any, topic: str, partition: int) -> Any:
        self.records[topic] = self.records.get(topic, 0) + builder.record_count()
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


async def drive(engine: Any, turns: list[list[Any]], marker: Any = None) -> dict[str, Any]:
    from app.outputs import producer_batches

    producer = FakeProducer()

    async def partitions(_producer: Any, _topic: str) -> int:
        return 4

    loop = engine.loop
    with (
        mock.patch.object(producer_batches, "aiokafka_producer", lambda app: producer),
        mock.patch.object(producer_batches, "_partitions", partitions),
    ):
        loop.pipeline.start()
        n = 0
        if marker is not None:
            marker.etj_marker_start()
        t0, cpu0 = time.perf_counter(), time.process_time()
        for turn in turns:
            unit = loop.handle(turn)
            if unit is not None:
                n += len(unit.sources)
                await loop.pipeline.hand_over(unit)
            while loop.in_flight:
                await asyncio.sleep(0)
        while loop.intake._ready:  # what flow control still holds
            unit = loop.handle([])
            if unit is None:
                break
            n += len(unit.sources)
            await loop.pipeline.hand_over(unit)
            while loop.in_flight:
                await asyncio.sleep(0)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if marker is not None:
            marker.etj_marker_stop()
        loop.pipeline.stop()
    return {
        "handled": n,
        "seconds": seconds,
        "us_per_record": seconds / max(n, 1) * 1e6,
        "cpu_us_per_record": cpu / max(n, 1) * 1e6,
        "produced": producer.records,
    }


class CollectorClock:
    """The time the cyclic garbage collector takes (``gc.callbacks``), per generation."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--consultants", type=int, default=1_000)
    ap.add_argument("--fetch", type=int, default=500, help="records per partition per fetch")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument(
        "--tick-every",
        type=int,
        default=50,
        help="a tick of each partition every N turns and after the last (0: none)",
    )
    ap.add_argument("--profile", action="store_true", help="cProfile: the top functions")
    ap.add_argument("--shaped", action="store_true", help="a spec with shaped sides")
    ap.add_argument(
        "--hot-key",
        action="store_true",
        help="bench.hot_key's workload: one consultant with every recommendation",
    )
    ap.add_argument(
        "--catalogue",
        type=int,
        default=0,
        help="the movies join replaying bench.bootstrap's catalogue of N movies",
    )
    ap.add_argument("--store", choices=("memory", "rocksdb"), default="memory")
    ap.add_argument(
        "--callgrind",
        action="store_true",
        help="count instructions only while handling (under valgrind: bench.instructions)",
    )
    ap.add_argument("--sort", default="tottime", help="cProfile order: tottime, cumulative")
    ap.add_argument("--top", type=int, default=35)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-freeze", action="store_true", help="no gc.freeze() before the run")
    args = ap.parse_args()
    os.environ.setdefault("ETJ_FLOW_CONTROL", "true")
    if args.store == "rocksdb":
        os.environ["ETJ_STORE_URL"] = "rocksdb://"
        os.environ["ETJ_DATADIR"] = tempfile.mkdtemp(prefix="etj-kernel-")
    if args.shaped:
        spec = Path(tempfile.mkdtemp()) / "joins.json"
        spec.write_text(json.dumps([SHAPED_SPEC]))
        os.environ["ETJ_JOINS_FILE"] = str(spec)
    from app import runtime
    from app.agents.event_join import engines
    from app.faust_app import app
    from app.runtime import use_gc_thresholds

    use_gc_thresholds()  # the worker's (app.main)

    app.finalize()
    engine = engines["shaped" if args.shaped else "movies" if args.catalogue else "moods"]
    if args.catalogue:
        data = catalogue(args.catalogue)
    elif args.hot_key:
        from bench.hot_key import workload as hot_workload

        data = hot_workload(int(args.records * 0.7), 1)
    else:
        data = workload(args.records, args.consultants, seed=1)
    turns = batches(
        engine,
        shaped(data) if args.shaped else data if args.catalogue else flat(data),
        args.partitions,
        args.fetch,
        args.tick_every,
    )
    gc.collect()
    if not args.no_freeze and hasattr(runtime, "freeze_long_lived"):
        runtime.freeze_long_lived()  # as the worker does once its tables are recovered
    prof = cProfile.Profile() if args.profile else None
    if prof is not None:
        prof.enable()
    clock = CollectorClock()
    before = [s["collections"] for s in gc.get_stats()]
    gc.callbacks.append(clock)
    marker = None
    if args.callgrind:
        import ctypes

        from bench.instructions import marker_library

        marker = ctypes.CDLL(str(marker_library()))
    result = asyncio.run(drive(engine, turns, marker))
    gc.callbacks.remove(clock)
    if prof is not None:
        prof.disable()
    result["gc_collections"] = [s["collections"] - b for s, b in zip(gc.get_stats(), before)]
    result["gc_us_per_record"] = sum(clock.seconds) / max(result["handled"], 1) * 1e6
    result["tracked_objects"] = len(gc.get_objects())
    print(
        json.dumps(result)
        if args.json
        else f"{result['handled']} records, {result['us_per_record']:.2f} µs/record "
        f"({result['cpu_us_per_record']:.2f} CPU), of which collector "
        f"{result['gc_us_per_record']:.2f}; {result['produced']} records produced; gc "
        f"collections {result['gc_collections']}, {result['tracked_objects']} tracked after"
    )
    if prof is not None:
        stats = pstats.Stats(prof)
        stats.sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()

"""Tool: ``faust -A app.main archive TOPIC OUT.jsonl`` — a topic, start to end, as JSON lines.

The batch twin (``python -m app.batch``) reads these archives, so the whole loop — stream,
archive, exact answer, reconcile, backfill — runs on one machine without Spark's Kafka
connector. One line per record, the record's JSON value (DESIGN §1 fields); each partition's
records in log order (all a consumer relies on: per-key order), partitions interleaved.

Input topics of the joins are validated exactly as the worker validates them (including the
key check, which an archive cannot repeat later): records the worker dead-letters are left out
and counted, so the batch answer is computed from what the stream accepted. Other topics
(outputs, late, dead letters) are written as they are.

Where the log ends: brokers may under-report end offsets (tansu, DESIGN §5), so the archive
reads to the reported end *and then* until no record came for ``--idle-s`` seconds.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from faust.cli import argument, option

from app.copartition import bootstrap_servers
from app.faust_app import app, settings
from app.records import (
    CarArrivalIn,
    InvalidRecord,
    MoodIn,
    RecommendationIn,
    WireModel,
    ZoneIn,
    parse,
)


@dataclass
class ArchiveStats:
    read: int = 0
    written: int = 0
    invalid: int = 0  # input records the worker would dead-letter
    not_json: int = 0  # other topics: values that are not JSON (or are null)


def input_models() -> dict[str, type[WireModel]]:
    """Topic -> the model the worker validates its records with."""
    return {settings.moods_topic: MoodIn, settings.events_topic: RecommendationIn,
            settings.car_arrivals_topic: CarArrivalIn, settings.zones_topic: ZoneIn}


def archive_line(model: type[WireModel] | None, key: bytes | None, value: bytes | None,
                 ) -> str | None:
    """One record -> its archive line, or None when it is left out."""
    if model is not None:
        try:
            record = parse(model, key, value)
        except InvalidRecord:
            return None
        return json.dumps(record.model_dump(mode="json", exclude_none=True),
                          separators=(",", ":"))
    if value is None:
        return None
    try:
        data: Any = json.loads(value)
    except ValueError:
        return None
    return json.dumps(data, separators=(",", ":"))


async def archive_topic(broker_url: str, topic: str, out: str | Path,
                        model: type[WireModel] | None = None, idle_s: float = 2.0,
                        stall_s: float = 120.0, progress_s: float | None = 5.0,
                        ) -> ArchiveStats:
    """Write every record of ``topic`` to ``out`` (``-`` = stdout) as JSON lines.

    Lines are written as they are read (memory stays flat on big topics); each partition's
    records keep their log order. ``progress_s``: a progress line on stderr this often.
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers(broker_url),
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    stats = ArchiveStats()
    try:
        if topic not in await consumer.topics():
            raise SystemExit(f"archive: topic {topic!r} does not exist")
        parts = [TopicPartition(topic, p)
                 for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        total = sum(ends.values())
        sink: Any = (nullcontext(sys.stdout) if str(out) == "-"
                     else Path(out).open("w", encoding="utf-8"))
        with sink as f:
            last = shown = time.monotonic()
            while True:
                batch = await consumer.getmany(timeout_ms=200)
                for msgs in batch.values():
                    for m in msgs:
                        _archive_one(f, model, m.key, m.value, stats)
                        last = time.monotonic()
                now = time.monotonic()
                if progress_s is not None and now - shown >= progress_s:
                    print(f"archive: {topic}: {stats.read}/{total}+ records read",
                          file=sys.stderr, flush=True)
                    shown = now
                at_end = all([await consumer.position(tp) >= ends[tp] for tp in parts])
                if at_end and now - last >= idle_s:
                    break
                if not at_end and now - last >= stall_s:
                    raise SystemExit(f"archive: {topic}: no record for {stall_s}s before the "
                                     f"end ({stats.read} of {total} read)")
    finally:
        await consumer.stop()
    return stats


def _archive_one(f: IO[str], model: type[WireModel] | None, key: bytes | None,
                 value: bytes | None, stats: ArchiveStats) -> None:
    stats.read += 1
    line = archive_line(model, key, value)
    if line is None:
        if model is not None:
            stats.invalid += 1
        else:
            stats.not_json += 1
        return
    f.write(line + "\n")
    stats.written += 1


@app.command(
    argument("topic"),
    argument("out"),
    option("--idle-s", type=float, default=2.0,
           help="After the reported end, stop once no record came for this long."),
    option("--quiet", is_flag=True, default=False, help="No progress lines on stderr."),
    option("--raw", is_flag=True, default=False,
           help="Input topics too: write every JSON value, without the worker's validation."),
)
async def archive(self: object, topic: str, out: str, idle_s: float, quiet: bool,
                  raw: bool) -> None:
    """Archive TOPIC (from its start) to OUT as JSON lines, for the batch jobs."""
    model = None if raw else input_models().get(topic)
    stats = await archive_topic(settings.broker_url, topic, out, model, idle_s,
                                progress_s=None if quiet else 5.0)
    left_out = (f", {stats.invalid} invalid left out" if model is not None
                else f", {stats.not_json} non-JSON left out")
    print(f"archive: {stats.written} records of {topic} -> {out}{left_out}", file=sys.stderr)

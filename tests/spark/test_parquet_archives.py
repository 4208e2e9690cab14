"""Parquet archives, as ``faust -A app.main archive TOPIC OUT.parquet`` writes them: one folder
per topic partition, many files, typed columns plus ``_offset``; the batch jobs read them in
parallel and give the same answers as from JSON lines.

The sink is driven directly (records, partitions, offsets as a consumer would see them); the
real command over a broker is exercised by tests/spark/test_backfill_broker.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.batch.archives import MOODS, REVISIONS, read_archive
from app.batch.cli import main
from app.commands.archive import ParquetSink, parquet_columns
from app.faust_app import settings
from tests.harness import latest_by_id
from tests.spark.test_commands import mood_archives, read_lines, write_lines  # noqa: F401

ARGS = ["--no-progress"]


def as_parquet(
    path: Path,
    topic: str,
    records: list[dict[str, Any]],
    partitions: int = 3,
    rows_per_file: int = 4,
) -> str:
    """Spread records over partitions (by a key, as a producer does), offsets in log order."""
    sink = ParquetSink(path, parquet_columns(topic), rows_per_file=rows_per_file)
    offsets = [0] * partitions
    for r in records:
        key = str(r.get("id") or r.get("name") or r.get("consultant"))
        p = sum(key.encode()) % partitions
        sink.write(p, offsets[p], r)
        offsets[p] += 1
    sink.close()
    return str(path)


def test_a_parquet_dataset_per_partition_gives_the_same_answers(spark, mood_archives, tmp_path):
    moods = as_parquet(
        tmp_path / "moods.parquet", settings.moods_topic, read_lines(Path(mood_archives["moods"]))
    )
    events = as_parquet(
        tmp_path / "events.parquet",
        settings.events_topic,
        read_lines(Path(mood_archives["events"])),
    )
    log = mood_archives["log"]
    revisions = as_parquet(tmp_path / "revisions.parquet", settings.output_topic, log)

    files = sorted(Path(moods).glob("partition=*/part-*.parquet"))
    assert len({f.parent.name for f in files}) == 3 and len(files) > 3  # partitions, rolled
    assert not Path(moods + ".tmp-archive").exists()

    out = tmp_path / "joins.jsonl"
    assert (
        main(["exact", "--moods", moods, "--events", events, "--out", str(out), *ARGS], spark=spark)
        == 0
    )
    got = {r["id"]: tuple(r.values()) for r in read_lines(out)}
    assert got == mood_archives["expected"]
    assert (
        main(
            ["reconcile", "--moods", moods, "--events", events, "--revisions", revisions, *ARGS],
            spark=spark,
        )
        == 0
    )

    # equal revision numbers: the later offset wins, as a consumer reading the partition
    latest = read_archive(spark, revisions, REVISIONS)
    assert latest.count() == len(log)
    assert {r["id"] for r in latest.collect()} == set(latest_by_id(log))


def test_an_unknown_topic_keeps_json_values_and_late_envelopes_unwrap(spark, tmp_path):
    late = [
        {"record": {"name": "ann", "mood": "calm", "event_time": 5}, "horizon": 9},
        {"record": {"consultant": "ann", "recommendation": "tea", "event_time": 3}, "horizon": 9},
        {"name": "bob", "mood": "sad", "event_time": 7},
    ]
    path = as_parquet(tmp_path / "late.parquet", settings.late_topic, late)
    rows = read_archive(spark, path, MOODS).select("name", "mood", "event_time").collect()
    assert sorted(tuple(r) for r in rows) == [("ann", "calm", 5), ("bob", "sad", 7)]


def test_an_empty_topic_is_a_readable_empty_dataset(spark, tmp_path):
    path = as_parquet(tmp_path / "moods.parquet", settings.moods_topic, [])
    assert read_archive(spark, path, MOODS).count() == 0
    json.dumps(parquet_columns(settings.moods_topic))  # the columns are plain data

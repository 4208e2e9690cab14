"""The peer for ``bench.peer_pathway``: the mood join in Pathway (``asof_join``), as close to
etj's rule as the library allows. Run with the peer venv's python (``var/bench/pathway-venv``),
never imported by etj: ``python bench/pathway_peer_app.py '<json settings>'``.

Settings (JSON): ``broker``, ``group``, ``moods``, ``events``, ``output``,
``autocommit_ms`` (how often Pathway's Kafka reader closes a minibatch; its default is 1,500).

What it does: recommendations (left) × moods (right) on consultant, by event time, ``how=LEFT``,
backward (the last mood at or before; the recommendation's time − 1 ms makes it strictly
before, etj's rule, for integer milliseconds). Pathway keeps every row (no ``behavior``: no
forgetting), so a mood that arrives late re-joins what it changes: the output is an update
stream, each message a row with ``diff`` +1 (inserted) or −1 (retracted); a recommendation's
final answer is its row whose diffs sum to +1. Prints ``first_input_ms=<epoch ms>`` when the
first input row reaches the engine (the clock's start), as the Quix peer does. The output names
the recommendation's id ``rec_id`` (``id`` is Pathway's own column).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pathway as pw


class Mood(pw.Schema):
    name: str
    mood: str
    event_time: int


class Recommendation(pw.Schema):
    consultant: str
    recommendation: str
    event_time: int
    rec_id: str  # the record's "id" ("id" is Pathway's own column: the row's key)


def main(cfg: dict[str, Any]) -> None:
    settings = {
        "bootstrap.servers": cfg["broker"],
        "group.id": cfg["group"],
        "auto.offset.reset": "earliest",
        "session.timeout.ms": "6000",
        "fetch.wait.max.ms": str(int(cfg.get("fetch_wait_ms", 100))),
    }
    commit = int(cfg.get("autocommit_ms", 100))
    moods = pw.io.kafka.read(
        settings, cfg["moods"], schema=Mood, format="json", autocommit_duration_ms=commit
    )
    recs = pw.io.kafka.read(
        settings,
        cfg["events"],
        schema=Recommendation,
        format="json",
        json_field_paths={"rec_id": "/id"},
        autocommit_duration_ms=commit,
    )
    first: list[int] = []

    def seen(key: Any, row: dict[str, Any], time: int, is_addition: bool) -> None:
        if not first:
            first.append(time_ms())
            print(f"first_input_ms={first[0]}", flush=True)

    pw.io.subscribe(moods, on_change=seen)
    pw.io.subscribe(recs, on_change=seen)
    recs = recs.with_columns(before=pw.this.event_time - 1)  # strictly before, for ints
    joined = recs.asof_join(
        moods,
        recs.before,
        moods.event_time,
        recs.consultant == moods.name,
        how=pw.JoinMode.LEFT,
        direction=pw.temporal.Direction.BACKWARD,
    ).select(
        rec_id=recs.rec_id,
        consultant=recs.consultant,
        event_time=recs.event_time,
        recommendation=recs.recommendation,
        mood=moods.mood,
        mood_event_time=moods.event_time,
    )
    pw.io.kafka.write(joined, settings, cfg["output"], format="json")
    print("pathway peer: running", flush=True)
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)


def time_ms() -> int:
    return time.time_ns() // 1_000_000


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

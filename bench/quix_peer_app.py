"""The peer for ``bench.peer_quix``: the mood join in Quix Streams (``join_asof``), as close to
etj's rule as the library allows. Run with the peer venv's python (``var/bench/quix-venv``),
never imported by etj: ``python bench/quix_peer_app.py '<json settings>'``.

Settings (JSON): ``broker``, ``group``, ``moods``, ``events``, ``output``, ``state_dir``,
``batching`` (``"one-record"`` | ``"default"``), ``fetch_wait_ms``, ``grace_ms``.

What it does: recommendations (left) × moods (right), both keyed by consultant, event time from
the records' ``event_time`` (not the Kafka timestamp). One output per recommendation, shaped
as etj's revision (``id, consultant, event_time, recommendation, mood, mood_event_time``) so
the benchmark compares the two against one oracle. Differences from etj (``bench.peer_quix``
lists them in its result): join_asof matches at-or-before, so the left side's timestamp is the
recommendation's event time − 1 ms, which makes it strictly before for integer milliseconds;
a tie on a mood's event time keeps the last one stored, not the greatest mood; a mood that
arrives after a recommendation it should have joined revises nothing (no corrections).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from quixstreams import Application
from quixstreams.models.topics.manager import TopicManager


def shim_retention_ms() -> None:
    """Quix derives its changelog topics' config from the input topics' broker config and
    reads ``extra_config["retention.ms"]`` unguarded (``TopicManager.derive_topic_config``,
    quixstreams 3.28); tansu's DescribeConfigs answer has no ``retention.ms``, so the app dies
    with a KeyError before it consumes. An absent retention is taken as -1 (infinite), which is
    what tansu keeps anyway (``memory://``, nothing is deleted). Only this script is patched."""
    derive = TopicManager.derive_topic_config.__func__  # type: ignore[attr-defined]

    def derive_with_default(cls: type, topics: Any) -> Any:
        topics = list(topics)
        for t in topics:
            if t.broker_config is not None:
                t.broker_config.extra_config.setdefault("retention.ms", "-1")
        return derive(cls, topics)

    TopicManager.derive_topic_config = classmethod(derive_with_default)  # type: ignore[assignment]


def merge(rec: dict[str, Any], mood: dict[str, Any] | None) -> dict[str, Any]:
    """etj's revision fields (the comparable part, tests/oracle.py MOOD_ANSWER_FIELDS)."""
    return {
        "id": rec.get("id"),
        "consultant": rec["consultant"],
        "event_time": rec["event_time"],
        "recommendation": rec["recommendation"],
        "mood": None if mood is None else mood["mood"],
        "mood_event_time": None if mood is None else mood["event_time"],
        "revision": 1,
    }


def main(cfg: dict[str, Any]) -> None:
    shim_retention_ms()
    producer: dict[str, Any] = {}
    if cfg.get("batching") == "one-record":  # as etj's ETJ_PRODUCER_MAX_BATCH_SIZE=1
        producer = {"batch.num.messages": 1, "linger.ms": 0}
    first: list[int] = []

    def processed(topic: str, partition: int, offset: int) -> None:
        if not first:  # the clock starts at the first input handled (etj: its first record in)
            first.append(time.time_ns() // 1_000_000)
            print(f"first_processed_ms={first[0]}", flush=True)

    app = Application(
        broker_address=cfg["broker"],
        consumer_group=cfg["group"],
        auto_offset_reset="earliest",
        state_dir=cfg["state_dir"],
        # fetch wait as etj's on tansu (it holds an empty fetch for the whole wait); a short
        # session: tansu answered the first JoinGroup only after ~23 s with librdkafka's 45 s
        # default, 6 s with this (start-up only, which the benchmark does not time)
        consumer_extra_config={
            "fetch.wait.max.ms": int(cfg.get("fetch_wait_ms", 100)),
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            **cfg.get("consumer", {}),
        },
        producer_extra_config=producer,
        on_message_processed=processed,
        loglevel=cfg.get("loglevel", "WARNING"),
    )
    # event time from the value; recommendations 1 ms earlier: at-or-before -> strictly before
    events = app.topic(
        cfg["events"],
        key_deserializer="bytes",
        timestamp_extractor=lambda v, h, ts, tt: int(v["event_time"]) - 1,
    )
    moods = app.topic(
        cfg["moods"],
        key_deserializer="bytes",
        timestamp_extractor=lambda v, h, ts, tt: int(v["event_time"]),
    )
    output = app.topic(cfg["output"], key_serializer="bytes", value_serializer="json")
    recs = app.dataframe(events)  # key: consultant (bytes); value: {consultant, recommendation,..}
    joined = recs.join_asof(
        app.dataframe(moods),
        how="left",
        on_merge=merge,
        grace_ms=int(cfg.get("grace_ms", 3_600_000)),
    )
    joined.to_topic(output)  # (consultant, etj-shaped revision 1)
    print("quix peer: running", flush=True)
    app.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

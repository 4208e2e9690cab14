"""A retracting aggregate over the revision log: how many recommendations were made per mood.

The revision log (``etj-mood-recommendations``) is at-least-once and corrects itself: a join
first counted for ``europe`` may turn out to be ``africa``'s. A downstream aggregate therefore
has to *retract* what an earlier revision added: revision n says ``previous_mood`` (what n-1
said), so the fold applies (previous_mood, -1), (mood, +1).

Two rules make the fold exact whatever the delivery does (duplicates after a producer retry,
re-emission of current revisions after a crash, replays of the whole topic):
- a revision number not greater than the last applied one for its join id is ignored
  (a repeated revision never counts twice; a stale one never undoes a newer one);
- the retraction is ``previous_mood`` when the last applied revision was n-1 (the wire contract
  says what to undo); after a gap (n-1 never seen) it is what this fold itself counted for the
  join, and a consumer that started mid-log never undoes something it did not add. The fold
  keeps the mood it counted per join anyway (idempotence needs the revision number per join),
  so it also checks ``previous_mood`` against it: a disagreement is counted in ``mismatches``
  and the fold's own count wins, so counts never go negative.

The fold is pure (``apply`` over dicts): :func:`read_counts` is only a thin Kafka reader.

``python -m app.downstream.mood_counts`` prints the counts over the whole output topic as JSON.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NO_MOOD = None  # the bucket of recommendations that joined no mood (mood = null)


@dataclass
class MoodCounts:
    """Counts per mood, plus the per-join bookkeeping that makes the fold idempotent."""

    counts: Counter[str | None] = field(default_factory=Counter)
    #: join id -> (last applied revision number, the mood it added)
    applied: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    ignored: int = 0  # revisions skipped as repeated or stale
    mismatches: int = 0  # previous_mood disagreed with what the fold had counted for n-1

    def apply(self, rev: Mapping[str, Any]) -> bool:
        """Fold one revision record (wire dict); True if it changed the counts' bookkeeping."""
        jid, number, mood = rev["id"], int(rev["revision"]), rev["mood"]
        last = self.applied.get(jid)
        if last is not None and number <= last[0]:
            self.ignored += 1
            return False
        if last is not None:
            undo = rev["previous_mood"]
            if number != last[0] + 1 or undo != last[1]:
                # a gap (n-1 never seen) or a contract breach: undo what this fold added
                self.mismatches += number == last[0] + 1
                undo = last[1]
            self._add(undo, -1)
        self._add(mood, +1)
        self.applied[jid] = (number, mood)
        return True

    def _add(self, mood: str | None, delta: int) -> None:
        self.counts[mood] += delta
        if self.counts[mood] == 0:
            del self.counts[mood]

    def as_dict(self) -> dict[str | None, int]:
        return dict(self.counts)


def fold(revisions: Iterable[Mapping[str, Any]], into: MoodCounts | None = None) -> MoodCounts:
    """Apply revisions in log order."""
    state = into if into is not None else MoodCounts()
    for rev in revisions:
        state.apply(rev)
    return state


def counts_of_answers(moods: Iterable[str | None]) -> dict[str | None, int]:
    """The counts a correct fold must end with: one per join, under its final mood."""
    return dict(Counter(moods))


async def read_counts(
    bootstrap: str, topic: str, idle_s: float = 2.0, timeout_s: float = 120.0
) -> MoodCounts:
    """Fold ``topic`` from the beginning until ``idle_s`` pass without a record."""
    import time

    from aiokafka import AIOKafkaConsumer, TopicPartition

    from app.kafka.security import aiokafka_auth
    from app.settings import get_settings

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **aiokafka_auth(get_settings()),
    )
    await consumer.start()
    state = MoodCounts()
    try:
        if topic not in await consumer.topics():
            return state
        consumer.assign(
            [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        )
        await consumer.seek_to_beginning()
        deadline, last = time.monotonic() + timeout_s, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            for msgs in (await consumer.getmany(timeout_ms=300)).values():
                for m in msgs:  # per join id the log is ordered: its key picks one partition
                    state.apply(json.loads(m.value))
                    last = time.monotonic()
        return state
    finally:
        await consumer.stop()


def main() -> None:
    from app.kafka.connection import bootstrap_servers
    from app.settings import get_settings

    s = get_settings()
    state = asyncio.run(read_counts(bootstrap_servers(s.broker_url), s.output_topic))
    print(
        json.dumps(
            {
                "counts": {
                    ("null" if k is None else k): v
                    for k, v in sorted(state.counts.items(), key=str)
                },
                "joins": len(state.applied),
                "ignored_repeats": state.ignored,
                "previous_mood_mismatches": state.mismatches,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

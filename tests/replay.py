"""What a worker emits for one arrival order, without Faust: the engine's own rules and layout.

Tests and benchmarks that need a *stream's* revision log (the retracting consumer, the batch
twin's reconcile and backfill, the flow-control reference) replay records through the mood
spec's :class:`app.joins.state.JoinState` over plain dicts (:class:`app.state.overlay.MemoryIO`) — the very code a worker runs
between its table reads and writes, with no broker. It is no oracle (that is
:mod:`tests.oracle`): it is the engine, so what it answers is what the engine answers.
"""

from __future__ import annotations

from typing import Any

from app.inputs.records import MoodIn, RecommendationIn
from app.joins.catalog import mood_spec
from app.joins.keys import split_join_key
from app.joins.resolve import resolve
from app.joins.state import JoinState
from app.settings import Settings
from app.state.overlay import MemoryIO, Overlay
from tests.oracle import Mood, Recommendation

PARTITION = 0  # one partition: a replay has no co-partitioning to respect


class MoodReplay:
    """The mood join of one worker that never purges (no horizon): record in, revisions out."""

    def __init__(self) -> None:
        self.spec = resolve(mood_spec(Settings()))
        self.layout = JoinState(
            self.spec,
            Overlay(MemoryIO(bytes_keys=False)),
            Overlay(MemoryIO()),
            Overlay(MemoryIO(bytes_keys=False)),
        )

    def _wire(self, revisions: list[Any]) -> list[dict[str, Any]]:
        return [self.spec.to_wire(r) for r in revisions]

    def mood(self, mood: Mood) -> list[dict[str, Any]]:
        rec = MoodIn.model_validate(mood.to_wire())
        return self._wire(
            self.layout.on_version(
                PARTITION,
                self.spec.key_of(rec, self.spec.dimension),
                self.spec.version_of(rec),
                None,
                None,
            )
        )

    def recommendation(self, rec: Recommendation) -> list[dict[str, Any]]:
        parsed = RecommendationIn.model_validate(rec.to_wire())
        revisions, _ = self.layout.on_event(PARTITION, self.spec.event_of(parsed), None, None)
        return self._wire(revisions)

    def add(self, record: Mood | Recommendation) -> list[dict[str, Any]]:
        return self.mood(record) if isinstance(record, Mood) else self.recommendation(record)

    def current(self) -> list[dict[str, Any]]:
        """Every join's current revision, as it was emitted (what a re-delivered record
        re-emits)."""
        out = []
        state = self.layout
        for k, raw in state.joins.scan(PARTITION, b"J", b"K"):
            key, _, jid = split_join_key(k)
            rev = self.spec.rules.current(jid, key, state.load(raw))
            if rev is not None:
                out.append(rev)
        return self._wire(out)

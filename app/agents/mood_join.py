"""Agent: recommendations x moods, joined by event time, with corrections.

topics (moods, events, ticks) -> this agent -> tables (mood history, recent joins, clock,
active keys) -> output topics (revisions, dead letters, late).

One agent reads all three co-partitioned topics, so per worker there is one sequential loop:
table state of both sides is never touched by two coroutines at once. The join rules live in
:mod:`app.logic.mood_join`; this module only loads/stores state and sends what they return.

Ordering for crash safety (DESIGN §2, "never a different answer under an old number"):
state (changelog) is flushed *before* the revisions it numbers are sent, and the outputs are
flushed before the event is acknowledged. A crash between the two leaves a revision in state
that never reached the topic; so the first event this process handles on a partition it was
just given (ticks guarantee there is one) re-emits the partition's current revisions first.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from faust.types import TopicT

from app import metrics, sinks
from app.faust_app import app, settings
from app.logic.mood_join import (
    ConsultantState,
    Join,
    Mood,
    Recommendation,
    Revision,
    add_mood,
    add_recommendation,
    current_revisions,
    revisit,
)
from app.records import InvalidRecord, MoodIn, RecommendationIn, parse
from app.tables import active_keys, mood_history, recent_joins, stream_clock
from app.topics import dead_letters, late, mood_join_inputs, mood_recommendations

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Out:
    """A record to send once state is durable."""

    topic: TopicT
    key: bytes | None
    value: bytes


def load_state(name: str) -> ConsultantState:
    moods = mood_history.get(name) or []
    joins = recent_joins.get(name) or {}
    return ConsultantState([(t, m) for t, m in moods],
                           {jid: Join.from_json(v) for jid, v in joins.items()})


def save_moods(name: str, state: ConsultantState) -> None:
    mood_history[name] = [[t, m] for t, m in state.moods]


def save_joins(name: str, state: ConsultantState) -> None:
    if state.joins:
        recent_joins[name] = {jid: j.to_json() for jid, j in state.joins.items()}
    elif recent_joins.get(name) is not None:
        del recent_joins[name]


def mark_active(partition: int, name: str) -> None:
    keys = active_keys.get(partition) or []
    if name not in keys:
        active_keys[partition] = sorted([*keys, name])


def advance_clock(partition: int, event_time: int) -> None:
    clock = stream_clock.get(partition)
    if clock is None or event_time > clock:
        stream_clock[partition] = event_time
        metrics.stream_time.labels(str(partition)).set(event_time)


def revision_out(rev: Revision) -> Out:
    metrics.revisions_out.labels(rev.cause).inc()
    return Out(mood_recommendations, rev.id.encode(), json.dumps(rev.to_wire()).encode())


def on_input(topic: str, partition: int, offset: int, key: bytes | None,
             value: bytes | None) -> list[Out]:
    """One mood or recommendation: validate, route late ones, join, return what to send."""
    metrics.records_in.labels(topic).inc()
    is_mood = topic == settings.moods_topic
    try:
        rec: Any = parse(MoodIn if is_mood else RecommendationIn, key, value)
    except InvalidRecord as exc:
        metrics.dead_letters.labels(topic).inc()
        return [Out(dead_letters, key, sinks.dead_letter(topic, partition, offset, key, value,
                                                         str(exc)))]
    clock = stream_clock.get(partition)
    if clock is not None and rec.event_time < clock - settings.retention_ms:
        metrics.late_records.labels(topic).inc()
        return [Out(late, key, sinks.late_record(topic, partition, offset, rec.model_dump(),
                                                 rec.event_time, clock,
                                                 clock - settings.retention_ms))]
    advance_clock(partition, rec.event_time)
    name = rec.name if is_mood else rec.consultant
    state = load_state(name)
    if is_mood:
        changed, revisions = add_mood(state, Mood(rec.name, rec.mood, rec.event_time))
        if changed:
            save_moods(name, state)
    else:
        revisions = add_recommendation(state, Recommendation(
            rec.consultant, rec.recommendation, rec.event_time, rec.id))
    if revisions:
        save_joins(name, state)
    mark_active(partition, name)
    return [revision_out(r) for r in revisions]


def on_tick(partition: int) -> list[Out]:
    """Revisit partition ``partition``: re-check recent joins, finalise and purge old state."""
    clock = stream_clock.get(partition)
    keys = active_keys.get(partition) or []
    if clock is None or not keys:
        return []
    horizon = clock - settings.retention_ms
    outs: list[Out] = []
    still_active = []
    for name in keys:
        state = load_state(name)
        revisions, joins_dropped, moods_dropped = revisit(
            state, name, clock - settings.review_lag_ms, horizon)
        if revisions or joins_dropped:
            save_joins(name, state)
        if moods_dropped:
            save_moods(name, state)
        metrics.joins_finalised.inc(joins_dropped)
        outs.extend(revision_out(r) for r in revisions)
        if state.joins or len(state.moods) > 1:
            still_active.append(name)
    if still_active != keys:
        active_keys[partition] = still_active
    return outs


#: partitions whose recovered revisions this process has re-emitted (in memory, per process)
_resumed: set[int] = set()


@app.on_partitions_assigned.connect
async def _forget_lost_partitions(app: Any, assigned: set[Any], **kwargs: Any) -> None:
    """A partition that left this worker comes back with recovered state: re-emit it again."""
    _resumed.intersection_update(tp.partition for tp in assigned
                                 if tp.topic == settings.ticks_topic)


def resume(partition: int) -> list[Out]:
    """Re-emit, once per assignment, the current revision of every join recovered for p."""
    _resumed.add(partition)
    return [Out(mood_recommendations, r.id.encode(), json.dumps(r.to_wire()).encode())
            for name in active_keys.get(partition) or []
            for r in current_revisions(load_state(name), name)]


@app.agent(mood_join_inputs)
async def mood_join(stream: Any) -> None:
    """Join every mood/recommendation as it arrives; revisit a partition on each tick."""
    async for event in stream.events():
        msg = event.message
        try:
            outs = [] if msg.partition in _resumed else resume(msg.partition)
            if msg.topic == settings.ticks_topic:
                outs += on_tick(msg.partition)
            else:
                outs += on_input(msg.topic, msg.partition, msg.offset, msg.key, msg.value)
        except Exception as exc:  # a bug must not kill the worker nor lose the record
            log.exception("failed on %s[%s]@%s", msg.topic, msg.partition, msg.offset)
            outs = [Out(dead_letters, msg.key, sinks.dead_letter(
                msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                f"internal error: {exc!r}"))]
        if outs:
            await app.producer.flush()  # state first: revisions never outrun their changelog
            for out in outs:
                await out.topic.send(key=out.key, value=out.value, force=True)
            await app.producer.flush()  # outputs durable before this offset can be committed

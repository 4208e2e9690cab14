"""Timer: one revisit tick per owned partition of every join spec, every ETJ_REVISIT_INTERVAL_S.

Same pattern as :mod:`app.timers` (a timer cannot write tables; it asks the agent that owns
partition p to revisit p through the spec's co-partitioned ticks topic). The mood spec's ticks
topic is already served by :mod:`app.timers`, so it is skipped here.
"""

from __future__ import annotations

from app.agents.event_join import engines
from app.faust_app import app, settings


def owned_partitions(topic: str) -> set[int]:
    return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic}


@app.timer(interval=settings.revisit_interval_s)
async def send_join_ticks() -> None:
    """Ask the agent that owns each of our partitions of each join to revisit it."""
    for engine in engines.values():
        if engine.spec.ticks == settings.ticks_topic:
            continue  # app.timers sends these
        for partition in sorted(owned_partitions(engine.spec.ticks)):
            await engine.ticks.send(value=b"{}", partition=partition)

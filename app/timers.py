"""Timer: one revisit tick per owned partition, every ``ETJ_REVISIT_INTERVAL_S``.

Faust timers run on wall-clock time outside any stream, so they cannot write tables (a table
write needs the current event's partition for its changelog). The timer therefore only *sends*
a tick to partition p of the co-partitioned ticks topic; the mood-join agent that owns p consumes
it and revisits p's state from inside its stream. Ticks also guarantee the agent touches every
partition it owns soon after an assignment (see ``resume`` in the agent).
"""

from __future__ import annotations

from app.faust_app import app, settings
from app.topics import ticks

def owned_partitions() -> set[int]:
    return {tp.partition for tp in app.assignor.assigned_actives()
            if tp.topic == settings.ticks_topic}


@app.timer(interval=settings.revisit_interval_s)
async def send_revisit_ticks() -> None:
    """Ask the agent that owns each of our partitions to revisit it."""
    for partition in sorted(owned_partitions()):
        await ticks.send(value=b"{}", partition=partition)

"""Timer: one revisit tick per owned partition, every ``ETJ_REVISIT_INTERVAL_S``.

Faust timers run on wall-clock time outside any stream, so they cannot write tables (a table
write needs the current event's partition for its changelog). The timer therefore only *sends*
a tick to partition p of the co-partitioned ticks topic; the mood-join agent that owns p consumes
it and revisits p's state from inside its stream. A partition this worker did not own at the
previous tick gets ``reemit``: its state was just recovered, and revisions whose send was lost
in a crash are sent again (same number, same answer).
"""

from __future__ import annotations

import json

from app.faust_app import app, settings
from app.topics import ticks

_owned_last_tick: set[int] = set()


def owned_partitions() -> set[int]:
    return {tp.partition for tp in app.assignor.assigned_actives()
            if tp.topic == settings.ticks_topic}


@app.timer(interval=settings.revisit_interval_s)
async def send_revisit_ticks() -> None:
    """Ask the agent that owns each of our partitions to revisit it."""
    global _owned_last_tick
    owned = owned_partitions()
    for partition in sorted(owned):
        value = json.dumps({"reemit": partition not in _owned_last_tick}).encode()
        await ticks.send(value=value, partition=partition)
    _owned_last_tick = owned

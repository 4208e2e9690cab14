"""Timer: one revisit tick per owned partition of every agent, every ``ETJ_REVISIT_INTERVAL_S``.

Faust timers run on wall-clock time outside any stream, so they cannot write tables (a table
write needs the current event's partition for its changelog). The timer therefore only *sends*
a tick to partition p of each agent's co-partitioned ticks topic (:data:`app.topology.ticks_topics`);
the agent that owns p consumes it and revisits p's state from inside its stream (a join: review,
finalise, purge; every agent: let go of records flow control held too long). Ticks also make
an agent touch every partition it owns soon after an assignment (a join re-emits what a crash
may have lost, see ``JoinEngine.resume``).
"""

from __future__ import annotations

from app.faust_app import app, settings
from app.topology import owned_partitions, ticks_topics


@app.timer(interval=settings.revisit_interval_s)
async def send_revisit_ticks() -> None:
    """Ask the agent that owns each of our partitions to revisit it."""
    for ticks in ticks_topics:
        for partition in owned_partitions(ticks.get_topic_name()):
            await ticks.send(value=b"{}", partition=partition)

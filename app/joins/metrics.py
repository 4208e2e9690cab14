"""Per-join counters (label ``join`` = spec name), next to the process-wide ones of app.metrics.

``held``/``unmatched`` answer the question inner mode raises: how many events waited for a
dimension that had not arrived, and how many were dropped because it never did.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

records = Counter("etj_join_records", "Input records consumed by a join", ["join", "side"])
revisions = Counter("etj_join_revisions", "Revisions emitted by a join", ["join", "cause"])
late = Counter("etj_join_late", "Records routed to the late topic", ["join", "side"])
dead = Counter("etj_join_dead_letters", "Records routed to the dead-letter topic",
               ["join", "side"])
held = Counter("etj_join_held", "Events held (inner mode) because no dimension version applied",
               ["join"])
released = Counter("etj_join_released", "Held events emitted when their dimension arrived",
                   ["join"])
unmatched = Counter("etj_join_unmatched",
                    "Held events dropped at the horizon: their dimension never arrived", ["join"])
finalised = Counter("etj_join_finalised", "Joins dropped from state past the horizon", ["join"])
flow_waiting = Gauge("etj_join_flow_waiting", "Records queued by flow control (waiting for the "
                     "other input to catch up in event time)", ["join"])
flow_forced = Counter("etj_join_flow_forced", "Records let go by flow control before the lagging "
                      "input caught up (wait timed out or buffer full)", ["join"])
stream_time = Gauge("etj_join_stream_time_ms", "Greatest event time seen, per join and partition",
                    ["join", "partition"])


def snapshot(join: str) -> dict[str, float]:
    """This process's counters of one join, summed over their other labels."""
    out: dict[str, float] = {}
    for name, metric in (("records", records), ("revisions", revisions), ("late", late),
                         ("dead_letters", dead), ("held", held), ("released", released),
                         ("unmatched", unmatched), ("finalised", finalised)):
        total = 0.0
        for family in metric.collect():
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.labels.get("join") == join:
                    total += sample.value
        out[name] = total
    return out

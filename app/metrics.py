"""Process-wide counters (Prometheus client), incremented by the agents, read by the views."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

records_in = Counter("etj_records_in", "Input records consumed", ["topic"])
dead_letters = Counter("etj_dead_letters", "Records sent to the dead-letter topic", ["topic"])
late_records = Counter("etj_late_records", "Records older than the retention horizon", ["topic"])
revisions_out = Counter("etj_revisions", "Revisions emitted to the output topic", ["cause"])
joins_finalised = Counter("etj_joins_finalised", "Joins dropped from state past the horizon")
stream_time = Gauge("etj_stream_time_ms", "Greatest event time seen", ["partition"])

# --- operation: refreshed by the /metrics and /stats/ views from this worker's state ---
ready = Gauge("etj_ready", "1 when this worker's tables are recovered and it consumes input")
recovery_remaining = Gauge("etj_recovery_remaining",
                           "Changelog records this worker still has to recover (actives)")
table_keys = Gauge("etj_table_keys", "Keys in this worker's local store", ["table"])
retention_horizon = Gauge("etj_retention_horizon_ms",
                          "Stream time minus retention, per partition this worker owns",
                          ["partition"])


def totals(metric: Counter | Gauge, label: str | None = None) -> dict[str, float]:
    """Current values of ``metric`` in this process: {label value: value} ('' if unlabelled)."""
    out: dict[str, float] = {}
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            out[sample.labels.get(label, "") if label else ""] = sample.value
    return out


# --- car join ---
car_moves = Counter("etj_car_moves", "Car moves sent to the zone side", ["op"])
car_outputs = Counter("etj_car_pollution", "Car pollution records emitted", ["cause"])

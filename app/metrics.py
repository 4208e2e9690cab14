"""Every counter and gauge etj exports (Prometheus client): one family per concept, each with a
``join`` label (the spec name, or ``cars`` for the car join), so a record is counted once.

Incremented by the agents, refreshed by the views (/metrics, /stats/), read by the Grafana
dashboard (helm/etj/files/grafana-dashboard.json, checked by tests/unit/test_dashboard.py).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

# --- records in and where they went (per join) ---
records_in = Counter("etj_records_in", "Input records consumed", ["join", "topic"])
dead_letters = Counter(
    "etj_dead_letters", "Records sent to the dead-letter topic", ["join", "topic"]
)
late_records = Counter(
    "etj_late_records", "Records older than the retention horizon", ["join", "topic"]
)
refused = Counter(
    "etj_refused_records",
    "Input records refused at the door (dead-lettered): "
    "rule 'partitioner' (not Kafka's default partitioner's partition for its "
    "key) or 'future' (an event time too far ahead; ETJ_MAX_FUTURE_MS)",
    ["join", "topic", "rule"],
)
revisions_out = Counter(
    "etj_revisions", "Revisions emitted to a join's output topic", ["join", "cause"]
)
joins_finalised = Counter(
    "etj_joins_finalised", "Joins dropped from state past the horizon", ["join"]
)
stream_time = Gauge("etj_stream_time_ms", "Greatest event time seen", ["join", "partition"])

# --- inner mode and a bounded hold: events that wait for their dimension ---
held = Counter(
    "etj_join_held",
    "Events held (inner mode, or a bounded hold) because no dimension version applied",
    ["join"],
)
released = Counter(
    "etj_join_released",
    "Held events emitted: their dimension arrived, or their hold ended",
    ["join"],
)
unmatched = Counter(
    "etj_join_unmatched",
    "Held events dropped at the horizon: their dimension never arrived",
    ["join"],
)

# --- flow control (app.inputs.flow_control) ---
flow_waiting = Gauge(
    "etj_join_flow_waiting",
    "Records queued by flow control (waiting for the other input to catch up in event time)",
    ["join"],
)
flow_forced = Counter(
    "etj_join_flow_forced",
    "Records let go by flow control before the lagging "
    "input caught up (wait timed out or buffer full)",
    ["join"],
)

# --- car join ---
car_moves = Counter("etj_car_moves", "Car moves sent to the zone side", ["op"])
car_outputs = Counter("etj_car_pollution", "Car pollution records emitted", ["cause"])

# --- operation: refreshed by the /metrics and /stats/ views from this worker's state ---
ready = Gauge("etj_ready", "1 when this worker's tables are recovered and it consumes input")
recovery_remaining = Gauge(
    "etj_recovery_remaining", "Changelog records this worker still has to recover (actives)"
)
table_keys = Gauge("etj_table_keys", "Keys in this worker's local store", ["table"])
rocksdb_memory = Gauge(
    "etj_rocksdb_memory_bytes",
    "RocksDB memory in use by this worker's "
    "tables (one budget per worker: app.compat.rocksdb_memory)",
    ["part"],
)
retention_horizon = Gauge(
    "etj_retention_horizon_ms",
    "Stream time minus retention, per partition this worker owns",
    ["join", "partition"],
)


def totals(metric: Counter | Gauge, label: str | None = None, **where: str) -> dict[str, float]:
    """This process's values of ``metric``, summed per value of ``label`` ('' if None), over
    the samples whose labels match ``where`` (e.g. ``join="moods"``)."""
    out: dict[str, float] = {}
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            if any(sample.labels.get(k) != v for k, v in where.items()):
                continue
            k = sample.labels.get(label, "") if label else ""
            out[k] = out.get(k, 0.0) + sample.value
    return out


def snapshot(join: str) -> dict[str, float]:
    """One join's counters in this process, summed over their other labels (GET /joins/)."""
    return {
        name: sum(totals(metric, join=join).values())
        for name, metric in (
            ("records", records_in),
            ("revisions", revisions_out),
            ("late", late_records),
            ("dead_letters", dead_letters),
            ("held", held),
            ("released", released),
            ("unmatched", unmatched),
            ("finalised", joins_finalised),
        )
    }

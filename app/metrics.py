"""Every counter and gauge etj exports (Prometheus client): one family per concept, each with a
``join`` label (the spec name, or ``cars`` for the car join), so a record is counted once.

Incremented by the agents, refreshed by the views (/metrics, /stats/), read by the Grafana
dashboard (helm/etj/files/grafana-dashboard.json, checked by tests/unit/test_dashboard.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# --- records in and where they went (per join) ---
records_in = Counter("etj_records_in", "Input records consumed", ["join", "topic"])
dead_letters = Counter(
    "etj_dead_letters", "Records sent to the dead-letter topic", ["join", "topic"]
)
late_records = Counter(
    "etj_late_records", "Records older than the retention horizon", ["join", "topic"]
)
tombstones = Counter(
    "etj_tombstones",
    "Tombstones (null values) read as deletes: a dimension key's version ended, a "
    "foreign-key row removed (one for a key with no version is counted and kept too)",
    ["join", "topic"],
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


# --- lag and latency: "slow" told from "stuck" (refreshed by the views, observed by the loop) ---
input_lag = Gauge(
    "etj_input_lag_records",
    "Records of an input partition this worker owns that its join has not handled yet: the "
    "partition's high water at the last fetch minus the next offset to handle",
    ["join", "topic", "partition"],
)
finality_lag = Gauge(
    "etj_finality_lag_ms",
    "A finality join's partition: its stream time minus the event time its latest promise "
    "covers (retention plus how far the promise lags; grows while promises stand still)",
    ["join", "partition"],
)


class WeightedHistogram(Collector):
    """A histogram whose observation may count for many records at once.

    Why not prometheus_client's Histogram: the answer latency is known per input batch (when
    it reached the worker, when the broker took what it made), for every record of it; calling
    ``observe`` once per record would cost ~1 µs each on the hot path, here one bisect per
    batch and partition does. Exposed as a plain histogram (``_bucket``, ``_sum``,
    ``_count``), so ``histogram_quantile`` reads it."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.name, self.documentation = name, documentation
        self._labelnames = tuple(labelnames)  # (what tests/unit/test_dashboard.py reads)
        self.buckets = tuple(buckets)
        #: label values -> [count per bucket (the last: +Inf), sum]
        self._series: dict[tuple[str, ...], list[float]] = {}
        registry.register(self)

    def observe(self, labels: tuple[str, ...], value: float, count: int = 1) -> None:
        """``count`` observations of ``value``."""
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [0.0] * (len(self.buckets) + 2)
        series[bisect_left(self.buckets, value)] += count
        series[-1] += value * count

    def remove(self, labels: tuple[str, ...]) -> None:
        self._series.pop(labels, None)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self._labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self._labelnames)
        edges = [repr(float(b)) for b in self.buckets] + ["+Inf"]
        for labels, series in self._series.items():
            cumulative, buckets = 0.0, []
            for edge, n in zip(edges, series[:-1]):
                cumulative += n
                buckets.append((edge, cumulative))
            family.add_metric(list(labels), buckets, series[-1])
        yield family


answer_latency = WeightedHistogram(
    "etj_answer_latency_seconds",
    "An input record's arrival at the worker (its fetch handed to the join) to the broker "
    "taking everything it made (for an event answered at once, its first revision)",
    ["join"],
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
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

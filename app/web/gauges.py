"""The gauges a scrape reads from this worker's state, brought up to date by ``/metrics`` and
``/stats/`` (counters are counted where things happen; these describe what *is*).

Each labelled gauge is pruned to what this worker owns now: a partition that moved to another
worker must not keep reporting from here, or a sum over workers counts it twice after a
rebalance.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import Gauge

from app import metrics
from app.agents.event_join import engines
from app.compat import rocksdb_memory
from app.compat.stores import committed_offset, read_offset
from app.faust_app import app
from app.loop.durable import loops
from app.state.store_io import estimated_keys
from app.topology import owned_partitions

__all__ = ["input_lags", "partition_clocks", "refresh_gauges", "table_sizes"]


def partition_clocks(engine: Any) -> dict[str, dict[str, int | None]]:
    """Stream time and retention horizon of each partition of one join this worker owns, and
    for a join with finality promises the event time its latest promise covers
    (``final_before``: every join before it is final; None before the first)."""
    out: dict[str, dict[str, int | None]] = {}
    spec, tables = engine.spec, engine.tables
    finality = spec.final_topic is not None
    for p in owned_partitions(spec.ticks):
        clock = tables.clock.get(p)
        row: dict[str, int | None] = {
            "stream_time": clock,
            "retention_horizon": None if clock is None else clock - spec.retention_ms,
        }
        if finality:
            promise = tables.clock.get(f"final:{p}")  # [final_before, sent_from, source]
            row["final_before"] = None if promise is None else promise[0]
        out[str(p)] = row
    return out


def table_sizes() -> dict[str, int]:
    """Keys per table in the local store.

    memory: every partition held here (actives and standbys); rocksdb: the actives, from
    RocksDB's own estimate (``rocksdb.estimate-num-keys``), since counting would read every key
    on each scrape.
    """
    return {name: estimated_keys(table) for name, table in sorted(app.tables.items())}


def input_lags() -> dict[tuple[str, str, int], int]:
    """(join, topic, partition) -> records of that input partition the join has not handled:
    the partition's high water at the consumer's last fetch minus the next offset to handle:
    the first not yet acknowledged, else where the consumer was sought to read from (a
    ``start``), else 0 (an input never committed is counted from the log's first offset: on a
    topic whose oldest records were deleted, that overstates the lag until the first commit). A
    partition not fetched yet is left out: its high water is not known. Ticks are not inputs."""
    try:
        consumer = app.consumer
        assigned = consumer.assignment()
    except Exception:  # no consumer yet (starting) or any more (stopping): nothing to report
        return {}
    out: dict[tuple[str, str, int], int] = {}
    for loop in loops:
        inputs = set(loop.inbox.topics) - {loop.ticks}
        for tp in assigned:
            if tp.topic not in inputs:
                continue
            highwater = consumer.highwater(tp)
            if highwater is None:
                continue
            handled_to = committed_offset(consumer, tp) or read_offset(consumer, tp) or 0
            out[(loop.join, tp.topic, tp.partition)] = max(0, highwater - handled_to)
    return out


def _prune(gauge: Gauge, keep: Iterable[tuple[str, ...]], **where: str) -> None:
    """Remove the children of ``gauge`` whose labels match ``where`` and are not in ``keep``."""
    names = gauge._labelnames  # the gauge's own label names, in order
    keep = set(keep)
    for family in gauge.collect():
        for sample in family.samples:
            if all(sample.labels.get(k) == v for k, v in where.items()):
                labels = tuple(sample.labels[n] for n in names)
                if labels not in keep:
                    keep.add(labels)  # a family lists each child once; remove it once
                    gauge.remove(*labels)


def refresh_gauges(state: dict[str, Any]) -> dict[str, Any]:
    """Bring the state gauges up to date from ``state`` (the recovery state the views read) and
    the tables; return what they were set from."""
    clocks = {name: partition_clocks(engine) for name, engine in engines.items()}
    sizes = table_sizes()
    metrics.ready.set(1 if state["ready"] else 0)
    metrics.recovery_remaining.set(state["active_remaining"])
    for name, n in sizes.items():
        metrics.table_keys.labels(name).set(n)
    rocksdb = rocksdb_memory.usage()
    for part, n in rocksdb.items():
        metrics.rocksdb_memory.labels(part).set(n)
    for spec_name, by_partition in clocks.items():
        owned = [(spec_name, p) for p in by_partition]
        for gauge in (metrics.stream_time, metrics.retention_horizon, metrics.finality_lag):
            _prune(gauge, owned, join=spec_name)
        for p, c in by_partition.items():
            stream_time, horizon = c["stream_time"], c["retention_horizon"]
            if stream_time is not None:
                assert horizon is not None  # made from the stream time (partition_clocks)
                metrics.stream_time.labels(spec_name, p).set(stream_time)
                metrics.retention_horizon.labels(spec_name, p).set(horizon)
                final_before = c.get("final_before")
                if final_before is not None:
                    metrics.finality_lag.labels(spec_name, p).set(stream_time - final_before)
    lags = input_lags()
    _prune(metrics.input_lag, {(j, t, str(p)) for j, t, p in lags})
    for (join, topic, partition), n in lags.items():
        metrics.input_lag.labels(join, topic, partition).set(n)
    return {
        "recovery": state,
        "partitions": clocks.get("moods", {}),
        "joins": clocks,
        "tables": sizes,
        "rocksdb_memory": rocksdb,
        "input_lag": {f"{j}/{t}/{p}": n for (j, t, p), n in sorted(lags.items())},
    }

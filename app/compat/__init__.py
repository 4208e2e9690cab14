"""Every patch etj makes to faust-streaming and aiokafka, and nothing else; ``install(app)``.

Faust and aiokafka carry the worker's guarantees (nothing lost, nothing committed unhandled)
only with these patches: each module says the upstream behaviour, the symptom it caused here,
the test that reproduces it, and when it can go. They reach into private attributes, so they
are tested against exact versions (:mod:`app.compat.versions`): outside that range the worker
refuses to start, and ``pyproject.toml`` pins the same range.

Installed once, by :func:`install`, from :mod:`app.main` before the worker starts:

- :mod:`~app.compat.versions` — refuse an untested faust-streaming / aiokafka;
- :mod:`~app.compat.delivery` — re-send through broker stalls, keep every sent-to topic's
  leaders, fail-stop on a lost send (but hand back an output refused for good: the durable loop
  dead-letters its input);
- :mod:`~app.compat.consumer` — etj's consumer class (the transport's, not a patch): input
  partitions handed to the agents a fetch at a time, offsets committed by acked range;
- :mod:`~app.compat.rebalance` — a rebalance seeks its input partitions before it resumes them,
  and seeks a partition with no committed offset to its start;
- :mod:`~app.compat.log_gaps` — aiokafka notes the offsets the log does not hold (a commit and
  a hand-over may pass those, and only those, without a record);
- :mod:`~app.compat.stall_guard` — read again an input partition whose records never reached
  its agent;
- :mod:`~app.compat.eager_delivery` — the consumer hands a changelog record to the conductor
  in place when that takes no wait, instead of in four tasks;
- :mod:`~app.compat.producer_buffer` — the producer buffer reads ``producer_threaded`` once,
  not for every record the conductor hands on;
- :mod:`~app.compat.batch_restore` — recovery applies changelog records in batches;
- :mod:`~app.compat.paused_fetch` — aiokafka keeps the records of partitions Faust has paused,
  even when every partition is paused (it read an empty set as "every partition");
- :mod:`~app.compat.changelog_holes` — a changelog partition is applied without a hole: records
  the consumer fetched and dropped are read again before anything after them is applied;
- :mod:`~app.compat.standby_offsets` — a changelog partition with nothing applied is read from
  its start instead of crashing recovery;
- :mod:`~app.compat.end_offsets` — end offsets from a Fetch too, for a broker whose ListOffsets
  under-reports batched partitions (the bundled tansu; ``ETJ_END_OFFSETS_BY_FETCH``);
- :mod:`~app.compat.fetch_wait` — the worker consumer's fetch wait is a setting;
- :mod:`~app.compat.table_start` — the table manager starts without Faust's fixed one-second
  sleep (every table is declared at import);
- :mod:`~app.compat.leave_group` — a stopping worker leaves its consumer group in the group's
  first generation too (tansu numbers it 0), so the next worker need not wait out its session;
- :mod:`~app.compat.rocksdb_memory` — one RocksDB block cache and one memtable budget per
  worker, shared by every table partition, instead of one of each per table partition;
- :mod:`~app.compat.snapshot_restore` — snapshots of RocksDB table partitions in object
  storage, installed before Faust opens a partition it has no local state for;
- :mod:`~app.compat.table_codec` — table rows decoded with orjson at once, not through Faust's
  serializer registry (used by ``app.topology``'s table schemas, nothing to install);
- :mod:`~app.compat.stores` — range scans over Faust's stores (memory: a sorted index;
  RocksDB: its per-partition ``Rdict``), a table's store read and written a batch at a time
  (:class:`~app.compat.stores.StoreIO`), and the consumer/store reads no public API offers.
"""

from __future__ import annotations

from typing import Any

from app.compat import (batch_restore, delivery, end_offsets, fetch_wait, leave_group,
                        log_gaps, paused_fetch, producer_buffer, rebalance, rocksdb_memory,
                        snapshot_restore, stall_guard, standby_offsets, table_start)
from app.compat.versions import check_versions

__all__ = ["install"]

_installed: set[int] = set()


def install(app: Any) -> None:
    """Check the versions, then wire every patch into ``app`` (idempotent per app)."""
    check_versions()
    if id(app) in _installed:
        return
    _installed.add(id(app))
    settings = app.etj
    fetch_wait.install(settings.consumer_fetch_max_wait_ms)
    paused_fetch.install()
    producer_buffer.install()
    batch_restore.install()
    standby_offsets.install()
    end_offsets.install(settings.end_offsets_by_fetch)
    delivery.install(app)
    rebalance.install()
    log_gaps.install()
    leave_group.install()
    table_start.install()
    stall_guard.install(app, settings.stall_check_s)
    rocksdb_memory.install(settings.rocksdb_block_cache_mb, settings.rocksdb_memtables_mb)
    snapshot_restore.install(app)

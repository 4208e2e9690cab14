"""Changelog rows written once per batch: the last value of each key, not every write.

Upstream (faust-streaming 0.15.3, ``Table.on_key_set`` / ``on_key_del``): every assignment to a
table key puts one changelog message in the producer buffer at once (``send_changelog`` ->
``Topic.send_soon``), drained one message per event-loop step by ``ProducerBuffer._handle_pending``;
when more than 100 wait, the consumer stops delivering (``wait_until_ebb``) until they drain.
Symptom here: a join writes a key's row, the partition's stream clock and its bookkeeping on
every record, ~5 sends per input record, most of them overwritten a few records later; one-record
producer batches make each a broker round trip (bench ``sends_per_record``, ``throughput_rps``).

:class:`WriteBehind` replaces those two hooks on the tables of one agent's
:class:`~app.agents.durable.DurableLoop`: a write updates the store at once (reads see it) and
records ``(table, partition, key) -> value``; :meth:`WriteBehind.flush`, called by the loop at
the end of each batch, sends one changelog message per key written in the batch — its last
value, or a tombstone — serialized by the table's own codecs and handed to the producer by
:func:`app.compat.delivery.send_direct` (its fail-stop applies); for a RocksDB table the last
row per partition records its offset in the store, as Faust's ``_on_changelog_sent`` does.
Nothing changes for durability: the batch's records are acked only once the broker has those
rows and the batch's outputs are sent (the loop's protocol), so a crash before that loses only
writes of records that are delivered again; recovery keeps the last value per key, which is the
value sent. Not called: Faust's per-write TTL bookkeeping and table sensors (etj's tables have
no TTL; its metrics are its own).

Tests: tests/agent/test_write_behind.py (one message per key per batch, its last value and
tombstones, the partition of the record that wrote it); every fault test (kill -9, rebalance,
broker restart) checks the recovered state is exact. Remove when Faust can batch changelog
writes itself (it cannot in 0.15.3).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from faust.stores.rocksdb import Store as RocksDBStore

from app.compat import delivery

__all__ = ["WriteBehind"]

_DELETED = object()


class WriteBehind:
    """The changelog rows one agent's tables owe since the last flush, last value per key."""

    def __init__(self, tables: Iterable[Any] = ()) -> None:
        #: (table, partition, key) -> last value (or _DELETED), in first-write order
        self.pending: dict[tuple[Any, int, Any], Any] = {}
        #: RocksDB tables: remember the changelog offset a partition's store holds (Faust's
        #: ``_on_changelog_sent``), so a restart keeping its volume replays only the tail
        self._persist_offsets: dict[Any, Callable[[Any], None] | None] = {}
        for table in tables:
            self.track(table)

    def track(self, table: Any) -> None:
        """Defer ``table``'s changelog writes to :meth:`flush`."""
        pending = self.pending
        partition_for_key = table.partition_for_key

        def on_key_set(key: Any, value: Any) -> None:
            pending[(table, partition_for_key(key), key)] = value

        def on_key_del(key: Any) -> None:
            pending[(table, partition_for_key(key), key)] = _DELETED

        table.on_key_set = on_key_set
        table.on_key_del = on_key_del

    def _persist_offset_of(self, table: Any) -> Callable[[Any], None] | None:
        if table in self._persist_offsets:
            return self._persist_offsets[table]
        persist = None
        if isinstance(table.data, RocksDBStore):  # the store exists once a row was written
            store = table.data

            def persist(fut: Any) -> None:
                if not fut.cancelled() and fut.exception() is None:
                    meta = fut.result()
                    store.set_persisted_offset(meta.topic_partition, meta.offset)

        self._persist_offsets[table] = persist
        return persist

    async def flush(self) -> list[Any]:
        """Hand one changelog message per written key to the producer; their futures (each
        done when the broker has the row)."""
        if not self.pending:
            return []
        rows = list(self.pending.items())
        self.pending.clear()
        futures = []
        last: dict[tuple[Any, int], Any] = {}  # (table, partition) -> its last row's future
        for (table, partition, key), value in rows:
            topic = table.changelog_topic
            raw_key, _ = topic.prepare_key(key, table.key_serializer, None, {})
            if value is _DELETED:
                raw_value = None
            else:
                raw_value, _ = topic.prepare_value(value, table.value_serializer, None, {})
            fut = await delivery.send_direct(table.app, topic.get_topic_name(), raw_key,
                                             raw_value, partition)
            futures.append(fut)
            last[(table, partition)] = fut
        for (table, _), fut in last.items():
            persist = self._persist_offset_of(table)
            if persist is not None:
                fut.add_done_callback(persist)
        return futures

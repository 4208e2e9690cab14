"""Faust's stores and tables subclassed for etj, and the store and consumer reads no public API
offers.

- ``memory://``: Faust's memory store keeps a plain ``dict``, which has no order. A
  :class:`RangeTable` gives its memory store a ``sortedcontainers.SortedDict`` instead
  (:class:`SortedMemoryStore`), or the mapping the table asks for
  (:meth:`RangeTable.memory_mapping`): the same mapping, whose keys are also kept sorted on every
  write, delete and changelog-recovery batch (``apply_changelog_batch`` goes through
  ``update``/``pop``), so the ordered index is never out of step and is rebuilt by recovery like
  the data itself.
- ``rocksdb://``: Faust's store (RocksDB is ordered), its options sharing the worker's memory
  budgets (:func:`share_budgets`, every table's: :class:`EtjTable`).

Any other store is refused when a range table is created, rather than silently falling back to
a full scan. :func:`app.state.range_scan.range_table` sets ``key_type=bytes``: Faust derives a
table's key serializer from its key type, not from a ``schema`` (with a ``raw`` schema the
changelog keys were still decoded as JSON, and recovery failed on the first non-UTF-8 key).

The reads themselves (ranges in key order, a range's edge row, a batch's rows) are etj's own,
in :mod:`app.state.store_io`; this module holds what reaches into Faust:
``Table._new_store_by_url``, ``Store._dbs``, ``Store._db_for_partition``,
``Store._decode_value``, ``Store._dbs_for_actives``, ``Store._key_partition``,
``Consumer._committed_offset``, each read by a one-line accessor. Upstream: faust-streaming
0.15.3 with rocksdict 0.3.29. Tests: tests/unit/test_range_scan.py (both stores, live writes,
changelog recovery, the offset row). Remove when Faust's stores offer an ordered
``items(lo, hi)`` per partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import faust
from faust import stores
from faust.exceptions import ImproperlyConfigured
from faust.stores.memory import Store as MemoryStore
from faust.stores.rocksdb import Store as RocksDBStore
from faust.types import StoreT
from sortedcontainers import SortedDict
from yarl import URL

from app.compat.rocksdb_memory import SharedBudgetOptions
from app.compat.upstream import replaces

__all__ = [
    "EtjTable",
    "RangeTable",
    "SortedMemoryStore",
    "active_dbs",
    "committed_offset",
    "db_for_partition",
    "key_partitions",
    "open_partitions",
    "share_budgets",
    "value_decoder",
]


class SortedMemoryStore(MemoryStore):
    """Faust's memory store, but its ``data`` dict keeps its keys sorted (the range index); a
    table whose keys come in kinds replaces it by its own mapping
    (:meth:`RangeTable.memory_mapping`)."""

    @replaces("faust.stores.memory:Store.__post_init__", "4f62b7b15f39")
    def __post_init__(self) -> None:
        """The memory store's mapping keeps its keys sorted.

        Upstream: Faust's memory store keeps a table in a plain ``dict``: a range of keys can
        only be found by walking every key.

        Symptom: the car join reads one zone's cars by key range; a walk over every car per
        reading grows with the whole table.

        Here the mapping is a ``SortedDict`` (or the table's own sorted mapping,
        :meth:`RangeTable.memory_mapping`); every dict operation Faust makes still works.

        Test: tests/unit/test_range_scan.py::test_memory_scan_never_walks_the_whole_table

        Remove when: Faust's stores offer ordered range scans.
        """
        super().__post_init__()
        self.data = SortedDict()


def share_budgets(store: StoreT) -> StoreT:
    """A RocksDB store's databases share the worker's memory budgets
    (:class:`~app.compat.rocksdb_memory.SharedBudgetOptions`): its options are built again as
    Faust built them (``Store.__init__``), with etj's class."""
    if isinstance(store, RocksDBStore):
        store.rocksdb_options = SharedBudgetOptions(
            **(store.options or {}), use_rocksdict=store.use_rocksdict
        )
    return store


class EtjTable(faust.Table):
    """Faust's table (the app's ``Table`` setting), its RocksDB stores sharing the worker's
    memory budgets."""

    @replaces("faust.tables.base:Collection._new_store_by_url", "28b01ee9bcc6")
    def _new_store_by_url(self, url: str | URL) -> StoreT:
        """A table's RocksDB store uses the worker's shared memory budgets.

        Upstream: ``Collection._new_store_by_url`` builds the store, which builds Faust's
        ``RocksDBOptions``; no setting names the options class.

        Symptom: one block cache and one set of memtables per table partition: a worker's
        memory grew with the partitions it took over (:mod:`app.compat.rocksdb_memory`).

        Test: tests/unit/test_rocksdb_memory.py::test_every_rocksdb_store_of_etjs_tables_uses_the_shared_budgets

        Remove when: :class:`~app.compat.rocksdb_memory.SharedBudgetOptions` goes.
        """
        return share_budgets(super()._new_store_by_url(url))


class RangeTable(EtjTable):
    """A table whose store can scan a key range in order (``memory://`` or ``rocksdb://``;
    :func:`app.state.store_io.iter_range`)."""

    def memory_mapping(self) -> MutableMapping[Any, Any] | None:
        """The mapping a memory store of this table keeps instead of a ``SortedDict``, or None
        (a table whose keys come in kinds: :class:`app.state.range_scan.KindedRangeTable`)."""
        return None

    @replaces("faust.tables.base:Collection._new_store_by_url", "28b01ee9bcc6")
    def _new_store_by_url(self, url: str | URL) -> StoreT:
        """A range table's store can scan a key range, in key order.

        Upstream: ``Collection._new_store_by_url`` builds whatever store the URL names.

        Symptom: a store that cannot scan in key order (Faust's memory store, a store of
        another kind) would make the car join walk every key, or fail at the first scan.

        Here ``memory://`` gets :class:`SortedMemoryStore` (with the table's own mapping,
        :meth:`memory_mapping`, if it has one), ``rocksdb://`` Faust's store (RocksDB is
        ordered), and anything else is refused when the table is declared; the RocksDB store
        shares the worker's budgets.

        Test: tests/unit/test_range_scan.py::test_each_store_gets_its_range_capable_class

        Remove when: Faust's stores offer ordered range scans.
        """
        cls: Any = stores.by_url(url)
        if cls is MemoryStore:
            cls = SortedMemoryStore
        elif not issubclass(cls, (SortedMemoryStore, RocksDBStore)):
            raise ImproperlyConfigured(
                f"table {self.name!r} needs ordered range scans, which store {url} cannot do; "
                "use memory:// or rocksdb://"
            )
        store = cls(
            url,
            self.app,
            self,
            table_name=self.name,
            key_type=self.key_type,
            key_serializer=self.key_serializer,
            value_serializer=self.value_serializer,
            value_type=self.value_type,
            loop=self.loop,
            options=self.options,
        )
        if isinstance(store, SortedMemoryStore):
            mapping = self.memory_mapping()
            if mapping is not None:
                store.data = mapping
        return share_budgets(store)


# --- Faust's private attributes, read by one accessor each -------------------------------------


def open_partitions(store: Any) -> dict[int, Any]:
    """partition -> the open rocksdict ``Rdict`` of a RocksDB store (``Store._dbs``: Faust
    opens a partition's database on first use; no public API lists them)."""
    return store._dbs


def committed_offset(consumer: Any, tp: Any) -> int | None:
    """The offset Faust will commit ``tp`` from next (the first not yet handled), or None."""
    return getattr(consumer, "_committed_offset", {}).get(tp)


def read_offset(consumer: Any, tp: Any) -> int | None:
    """Where Faust last sought ``tp`` to read from (``Consumer._read_offset``: a ``start``, a
    read again), or None (never sought, or sought to 0)."""
    return getattr(consumer, "_read_offset", {}).get(tp)


def db_for_partition(store: Any) -> Callable[[int], Any]:
    """partition -> its rocksdict ``Rdict``, of a RocksDB store (``Store._db_for_partition``:
    opened on first use)."""
    return store._db_for_partition


def active_dbs(store: Any) -> Iterator[Any]:
    """The rocksdict ``Rdict`` of each partition a RocksDB store holds actively
    (``Store._dbs_for_actives``)."""
    return store._dbs_for_actives()


def value_decoder(store: Any) -> Callable[[bytes | None], Any]:
    """How a store decodes a stored value as ``table[key]`` returns it (``Store._decode_value``)."""
    return store._decode_value


def key_partitions(store: Any) -> MutableMapping[Any, int]:
    """The memory store's key -> partition map (``Store._key_partition``: a rebalance drops the
    keys of the partitions it takes away)."""
    return store._key_partition

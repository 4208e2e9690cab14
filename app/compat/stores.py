"""Ordered range scans over Faust's stores, and the store and consumer reads no public API offers.

Faust has no public range-scan API, and a full-table scan to find one zone's cars would make a
zone update cost grow with the number of cars in *other* zones. Both stores etj supports can
scan a key range in order, each in its own way:

- ``rocksdb://``: Faust keeps one rocksdict ``Rdict`` per table partition (``Store._dbs``,
  opened by ``Store._db_for_partition``), keys are the serialized table keys, and a rocksdict
  iterator can ``seek``. The scan seeks to the low key of the partition's database and stops at
  the high key (also set as the iterator's upper bound, so RocksDB reads nothing beyond it). The
  database also holds Faust's own offset key (``Store.offset_key``); it is skipped.
- ``memory://``: Faust's memory store keeps a plain ``dict``, which has no order. A
  :class:`RangeTable` gives its memory store a ``sortedcontainers.SortedDict`` instead: the same
  mapping, whose keys are also kept sorted on every write, delete and changelog-recovery batch
  (``apply_changelog_batch`` goes through ``update``/``pop``), so the ordered index is never out
  of step and is rebuilt by recovery like the data itself. ``SortedDict.irange`` is the scan.

Keys are ``bytes``, stored and logged as they are, so that the stored order is byte order; see
:mod:`app.state.ordered_keys` for keys whose byte order is numeric order. :func:`range_table` sets
``key_type=bytes``: Faust derives a table's key serializer from its key type, not from a
``schema`` (with a ``raw`` schema the changelog keys were still decoded as JSON, and recovery
failed on the first non-UTF-8 key). Any other store is refused when the table is created,
rather than silently falling back to a full scan.

The public side is :mod:`app.state.range_scan` (``range_table``, ``scan``, ``scan_prefix``); this
module holds what reaches into Faust: ``Table._new_store_by_url``, ``Store._db_for_partition``,
``Store._decode_value``, ``Store._dbs_for_actives``, ``Consumer._committed_offset``.
Upstream: faust-streaming 0.15.3 with rocksdict 0.3.29. Tests: tests/unit/test_range_scan.py
(both stores, live writes, changelog recovery, the offset row). Remove when Faust's stores
offer an ordered ``items(lo, hi)`` per partition.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import faust
import orjson
import rocksdict
from faust import stores
from faust.exceptions import ImproperlyConfigured
from faust.stores.memory import Store as MemoryStore
from faust.stores.rocksdb import Store as RocksDBStore
from faust.types import TP, StoreT
from sortedcontainers import SortedDict
from yarl import URL

from app.compat.rocksdb_memory import SharedBudgetOptions
from app.compat.upstream import replaces

__all__ = [
    "RangeTable",
    "SortedMemoryStore",
    "StoreIO",
    "committed_offset",
    "estimated_keys",
    "iter_range",
]


class SortedMemoryStore(MemoryStore):
    """Faust's memory store, but its ``data`` dict keeps its keys sorted (the range index);
    keys starting with one of the table's ``point_prefixes`` are kept unsorted
    (:class:`SplitSortedDict`)."""

    @replaces("faust.stores.memory:Store.__post_init__", "4f62b7b15f39")
    def __post_init__(self) -> None:
        """The memory store's mapping keeps its keys sorted.

        Upstream: Faust's memory store keeps a table in a plain ``dict``: a range of keys can
        only be found by walking every key.

        Symptom: the car join reads one zone's cars by key range; a walk over every car per
        reading grows with the whole table.

        Here the mapping is a ``SortedDict`` (or :class:`SplitSortedDict`, which leaves point
        keys unsorted); every dict operation Faust makes still works.

        Test: tests/unit/test_range_scan.py::test_memory_scan_never_walks_the_whole_table

        Remove when: Faust's stores offer ordered range scans.
        """
        super().__post_init__()
        self.data = SortedDict()


class SplitSortedDict(MutableMapping):
    """A sorted mapping (``irange`` like ``SortedDict``) for a table whose keys come in kinds
    (a join's rows, :mod:`app.joins.keys`; a zone's cars, :mod:`app.state.ordered_keys`):

    - keys ``point(key)`` says are looked up by point only (a join's id index): a plain dict;
    - keys ``group(key)`` puts in a group are scanned only within it (a key's joins, a zone's
      cars): a dict, and per group a sorted list of its keys (``bisect`` in C); a group is every
      key that starts with it, and ``group_end(group)`` the first key after them (the tables
      give :func:`app.state.ordered_keys.prefix_end`: this module knows no key encoding);
    - every other key (a join's expiry index): a ``SortedDict``.

    A row written costs a dict store and, for a grouped key, an insort into its group's list
    instead of a ``SortedDict`` insert (~1.5 µs of Python each, the most of a join's writes).
    ``irange`` within one group reads its list; any other range reads the ``SortedDict`` (and,
    should it span groups, every grouped key in it, sorted: not on any hot path).

    ``by_first_byte``: the table says a key's kind follows from its first byte (a join's
    ``J``/``I``/``X`` rows; a zone's cars, all grouped), so the kind is asked once per first
    byte and remembered: every read and write of the hot path finds its mapping with one dict
    lookup instead of two calls and two slices (~0.5 µs of each)."""

    def __init__(
        self,
        point: Callable[[bytes], bool] | None = None,
        group: Callable[[bytes], bytes | None] | None = None,
        by_first_byte: bool = False,
        group_end: Callable[[bytes], bytes | None] | None = None,
    ) -> None:
        self.sorted = SortedDict()
        self.points: dict[Any, Any] = {}
        self.grouped: dict[Any, Any] = {}
        self.groups: dict[bytes, list[bytes]] = {}
        self._point = point or (lambda key: False)
        self._group = group or (lambda key: None)
        self._group_end = group_end or (lambda group: None)
        #: first byte -> the mapping of keys that start with it (``by_first_byte``)
        self._by_first: dict[int, Any] | None = {} if by_first_byte else None

    def _map(self, key: Any) -> Any:
        by_first = self._by_first
        if by_first is not None and type(key) is bytes and key:
            m = by_first.get(key[0])
            if m is None:
                m = by_first[key[0]] = self._kind(key)
            return m
        return self._kind(key)

    def _kind(self, key: Any) -> Any:
        if isinstance(key, bytes):
            if self._point(key):
                return self.points
            if self._group(key) is not None:
                return self.grouped
        return self.sorted

    def __getitem__(self, key: Any) -> Any:
        return self._map(key)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        m = self._map(key)
        if m is self.grouped and key not in m:
            group = self._group(key)
            keys = self.groups.get(group)
            if keys is None:
                self.groups[group] = [key]
            else:
                insort(keys, key)
        m[key] = value

    def __delitem__(self, key: Any) -> None:
        m = self._map(key)
        del m[key]
        if m is self.grouped:
            self._unindex(key)

    def _unindex(self, key: bytes) -> None:
        group = self._group(key)
        keys = self.groups[group]
        i = bisect_left(keys, key)
        del keys[i]
        if not keys:
            del self.groups[group]

    def __contains__(self, key: Any) -> bool:
        return key in self._map(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self._map(key).get(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        m = self._map(key)
        if m is self.grouped:
            if key not in m:
                if default:
                    return default[0]
                raise KeyError(key)
            value = m.pop(key)
            self._unindex(key)
            return value
        return m.pop(key, *default)

    def __len__(self) -> int:
        return len(self.sorted) + len(self.points) + len(self.grouped)

    def __iter__(self) -> Iterator[Any]:
        yield from self.sorted
        yield from self.points
        yield from self.grouped

    def clear(self) -> None:
        self.sorted.clear()
        self.points.clear()
        self.grouped.clear()
        self.groups.clear()

    def irange(
        self, lo: Any = None, hi: Any = None, inclusive: tuple[bool, bool] = (True, True)
    ) -> Iterator[Any]:
        group = self._group(lo) if isinstance(lo, bytes) else None
        if group is not None and lo.startswith(group):
            if hi is not None and (hi.startswith(group) or hi == self._group_end(group)):
                keys = self.groups.get(group, ())
                i = bisect_left(keys, lo) if inclusive[0] else bisect_right(keys, lo)
                j = (
                    len(keys)
                    if hi is None
                    else (bisect_right(keys, hi) if inclusive[1] else bisect_left(keys, hi))
                )
                return iter(keys[i:j])
        inside = list(self.sorted.irange(lo, hi, inclusive=inclusive))
        if self.grouped:  # a range across groups (not on a hot path): every grouped key in it
            lo_ok = (
                (lambda k: True)
                if lo is None
                else ((lambda k: k >= lo) if inclusive[0] else (lambda k: k > lo))
            )
            hi_ok = (
                (lambda k: True)
                if hi is None
                else ((lambda k: k <= hi) if inclusive[1] else (lambda k: k < hi))
            )
            inside = sorted(inside + [k for k in self.grouped if lo_ok(k) and hi_ok(k)])
        return iter(inside)

    def items_range(self, lo: bytes, hi: bytes | None) -> list[tuple[bytes, Any]]:
        """(key, value) of ``lo <= key < hi``, in key order: :meth:`irange` with the values
        read from the mapping the keys are in (a key's versions, read for every event, would
        otherwise find their mapping once per row)."""
        group = self._group(lo) if isinstance(lo, bytes) else None
        if (
            group is not None
            and lo.startswith(group)
            and hi is not None
            and (hi.startswith(group) or hi == self._group_end(group))
        ):
            keys = self.groups.get(group)
            if not keys:
                return []
            m = self.grouped
            return [(k, m[k]) for k in keys[bisect_left(keys, lo) : bisect_left(keys, hi)]]
        return [(k, self[k]) for k in self.irange(lo, hi, inclusive=(True, False))]

    def edge_item(self, lo: bytes, hi: bytes | None, last: bool) -> tuple[bytes, Any] | None:
        """(key, value) of :meth:`edge`'s key, or None."""
        key = self.edge(lo, hi, last)
        return None if key is None else (key, self[key])

    def edge(self, lo: bytes, hi: bytes | None, last: bool) -> Any:
        """The first (``last``: the last) key ``lo <= key < hi``, or None: a bounded read of
        one row, whatever the size of its group (a hot key's 100,000 versions)."""
        group = self._group(lo) if isinstance(lo, bytes) else None
        if (
            group is not None
            and lo.startswith(group)
            and hi is not None
            and (hi.startswith(group) or hi == self._group_end(group))
        ):
            keys = self.groups.get(group, ())
            i, j = bisect_left(keys, lo), bisect_left(keys, hi)
            return None if i >= j else keys[j - 1 if last else i]
        inside = list(self.irange(lo, hi, inclusive=(True, False)))
        return (inside[-1] if last else inside[0]) if inside else None


def share_budgets(store: StoreT) -> StoreT:
    """A RocksDB store's databases share the worker's memory budgets
    (:class:`~app.compat.rocksdb_memory.SharedBudgetOptions`): its options are built again as
    Faust built them (``Store.__init__``), with etj's class."""
    if isinstance(store, RocksDBStore):
        store.rocksdb_options = SharedBudgetOptions(  # type: ignore[attr-defined]
            **store.options, use_rocksdict=store.use_rocksdict
        )  # type: ignore[attr-defined]
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
    """A table whose store can answer :func:`iter_range` (``memory://`` or ``rocksdb://``)."""

    @replaces("faust.tables.base:Collection._new_store_by_url", "28b01ee9bcc6")
    def _new_store_by_url(self, url: str | URL) -> StoreT:
        """A range table's store can scan a key range, in key order.

        Upstream: ``Collection._new_store_by_url`` builds whatever store the URL names.

        Symptom: a store that cannot scan in key order (Faust's memory store, a store of
        another kind) would make the car join walk every key, or fail at the first scan.

        Here ``memory://`` gets :class:`SortedMemoryStore` (with the table's point and group
        keys split out), ``rocksdb://`` Faust's store (RocksDB is ordered), and anything else is
        refused when the table is declared; the RocksDB store shares the worker's budgets.

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
        point, group = getattr(self, "point_key", None), getattr(self, "group_key", None)
        if (point or group) and isinstance(store, SortedMemoryStore):
            store.data = SplitSortedDict(
                point,
                group,
                getattr(self, "kind_by_first_byte", False),
                getattr(self, "group_end", None),
            )
        return share_budgets(store)


def iter_range(
    table: faust.Table, lo: bytes, hi: bytes | None, partition: int
) -> Iterator[tuple[bytes, Any]]:
    """(key, decoded value) of ``lo <= key < hi`` in ``table``'s store, in key order."""
    store = table.data
    if isinstance(store, SortedMemoryStore):
        data = store.data
        if isinstance(data, SplitSortedDict):
            yield from data.items_range(lo, hi)
            return
        for key in list(data.irange(lo, hi, inclusive=(True, False))):
            yield key, data[key]
    elif isinstance(store, RocksDBStore):
        yield from _scan_rocksdb(store, lo, hi, partition)
    else:
        raise TypeError(
            f"table {table.name!r} has store {type(store).__name__}, which cannot "
            "scan a key range (define it with range_table)"
        )


def _scan_rocksdb(
    store: RocksDBStore, lo: bytes, hi: bytes | None, partition: int, decode: Any = None
) -> Iterator[tuple[bytes, Any]]:
    if not store.use_rocksdict:
        raise TypeError("range scans need the rocksdict driver of Faust's RocksDB store")
    db = store._db_for_partition(partition)
    opts = rocksdict.ReadOptions()
    # no set_iterate_lower_bound: in rocksdict 0.3.x it sets the *upper* bound (a bug, seen on
    # 0.3.29: the scan of the last zone came back empty); seek(lo) is the lower end instead
    if hi is not None:
        opts.set_iterate_upper_bound(hi)
    it = db.iter(opts)
    it.seek(lo)
    while it.valid():
        key = it.key()
        if hi is not None and key >= hi:  # the bound already stops it; belt and braces
            break
        if key != store.offset_key:  # Faust's own bookkeeping row, 16 bytes like our keys
            yield key, (decode or store._decode_value)(it.value())
        it.next()


def _edge_rocksdb(
    store: RocksDBStore, lo: bytes, hi: bytes | None, partition: int, last: bool
) -> tuple[bytes, Any] | None:
    """The first (``last``: the last) row ``lo <= key < hi`` of one partition's database."""
    it = store._db_for_partition(partition).iter(rocksdict.ReadOptions())
    skip = store.offset_key
    if last:
        if hi is None:
            it.seek_to_last()
        else:
            it.seek_for_prev(hi)
        while it.valid() and ((hi is not None and it.key() >= hi) or it.key() == skip):
            it.prev()
        if it.valid() and it.key() >= lo:
            return it.key(), orjson.loads(it.value())
        return None
    it.seek(lo)
    while it.valid() and it.key() == skip:
        it.next()
    if it.valid() and (hi is None or it.key() < hi):
        return it.key(), orjson.loads(it.value())
    return None


def estimated_keys(table: faust.Table) -> int:
    """Keys in ``table``'s local store: RocksDB's own estimate for the active partitions
    (counting would read every key), else the table's length."""
    store = table.data
    if isinstance(store, RocksDBStore) and store.use_rocksdict:
        return sum(
            db.property_int_value("rocksdb.estimate-num-keys") or 0
            for db in store._dbs_for_actives()
        )
    return len(table)


def open_partitions(store: Any) -> dict[int, Any]:
    """partition -> the open rocksdict ``Rdict`` of a RocksDB store (``Store._dbs``: Faust
    opens a partition's database on first use; no public API lists them)."""
    return store._dbs  # type: ignore[no-any-return]


def committed_offset(consumer: Any, tp: Any) -> int | None:
    """The offset Faust will commit ``tp`` from next (the first not yet handled), or None."""
    return getattr(consumer, "_committed_offset", {}).get(tp)


# --- a table's store read and written directly, a batch at a time (app.state.overlay) ----------------


class StoreIO:
    """One table's local store, read and written without Faust's Table API: the per-batch
    overlay of :mod:`app.state.overlay` reads rows it does not hold yet and writes a batch's changed
    rows at its end (its changelog rows are sent by the loop, not by Faust's ``on_key_set``).

    Keys and values are what the table's API would give: a ``json`` key table takes ``str`` /
    ``int`` keys, a range table ``bytes``; values are plain JSON. The memory store keeps them
    decoded (as Faust's does, and ``_key_partition`` so that a rebalance drops what another
    worker now owns, as Faust's recovery does for the rows it applied); RocksDB keeps the bytes
    of the changelog, one database per partition, a ``WriteBatch`` per partition and batch."""

    def __init__(self, table: faust.Table) -> None:
        self.table = table
        self.name = table.name
        self.bytes_keys = table.key_type is bytes
        self.changelog = table.changelog_topic.get_topic_name()

    @property
    def store(self) -> Any:
        return self.table.data

    def key_bytes(self, key: Any) -> bytes:
        """The changelog key of ``key`` (what Faust's json codec, orjson, writes)."""
        return key if self.bytes_keys else orjson.dumps(key)

    def _memory(self) -> Any:
        """The memory store's mapping, or None for RocksDB (the store is made on first use and
        kept by the table for its life)."""
        store = self.table.data
        if store is not self._store:
            self._store = store
            self._data = None if isinstance(store, RocksDBStore) else store.data
        return self._data

    _store: Any = None
    _data: Any = None

    def memory_data(self) -> Any:
        """The memory store's mapping (its keys as the table's, values decoded), or None for
        RocksDB: an ordered table's overlay reads it directly (app.state.overlay)."""
        return self._memory()

    def key_partitions(self) -> Any:
        """The memory store's key -> partition map (``Store._key_partition``: a rebalance
        drops the keys of the partitions it takes away), for an overlay writing the mapping
        directly (app.state.overlay)."""
        return self.store._key_partition

    def get(self, partition: int, key: Any) -> Any:
        data = self._memory()
        if data is not None:
            return data.get(key)
        raw = self._store._db_for_partition(partition).get(self.key_bytes(key))
        return None if raw is None else orjson.loads(raw)

    def scan(self, partition: int, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, Any]]:
        """(key, value) of ``lo <= key < hi`` (a range table), in key order."""
        store = self.table.data
        if isinstance(store, RocksDBStore):
            return _scan_rocksdb(store, lo, hi, partition, orjson.loads)
        if isinstance(store, SortedMemoryStore) and isinstance(store.data, SplitSortedDict):
            return iter(store.data.items_range(lo, hi))  # no generator frame per scan
        return iter_range(self.table, lo, hi, partition)

    def edge(
        self, partition: int, lo: bytes, hi: bytes | None, last: bool = False
    ) -> tuple[bytes, Any] | None:
        """(key, value) of the first (``last``: the last) row ``lo <= key < hi`` of a range
        table, or None: one row read, not the range (the version before a time)."""
        store = self.table.data
        if isinstance(store, RocksDBStore):
            return _edge_rocksdb(store, lo, hi, partition, last)
        data = store.data
        if isinstance(data, SplitSortedDict):
            return data.edge_item(lo, hi, last)
        key = next(iter(data.irange(lo, hi, inclusive=(True, False), reverse=last)), None)
        return None if key is None else (key, data[key])

    def write(self, partition: int, rows: list[tuple[Any, bytes | None, Any]]) -> None:
        """Apply ``(key, encoded value or None to delete, value)`` rows to one partition."""
        store = self.table.data
        if isinstance(store, RocksDBStore):
            batch = rocksdict.WriteBatch(raw_mode=True)
            for key, raw, _ in rows:
                kb = self.key_bytes(key)
                if raw is None:
                    batch.delete(kb)
                else:
                    batch.put(kb, raw)
            store._db_for_partition(partition).write(batch)
            return
        data, where = store.data, store._key_partition
        for key, raw, value in rows:
            if raw is None:
                data.pop(key, None)
                where.pop(key, None)
            else:
                data[key] = value
                where[key] = partition

    def write_one(self, partition: int, key: Any, value: Any, raw: bytes | None = None) -> None:
        """Write one row at once (``value`` None: delete it): an ordered table's rows are
        written through, so that range scans read the store alone (:mod:`app.state.overlay`).
        ``raw``: ``value`` encoded already (RocksDB stores it as it is)."""
        data = self._memory()
        if data is not None:
            where = self._store._key_partition
            if value is None:
                data.pop(key, None)
                where.pop(key, None)
            else:
                data[key] = value
                where[key] = partition
            return
        db = self._store._db_for_partition(partition)
        if value is None:
            db.delete(self.key_bytes(key))
        else:
            db.put(self.key_bytes(key), orjson.dumps(value) if raw is None else raw)

    def persist_offset(self, partition: int, offset: int) -> None:
        """The changelog offset a RocksDB partition's store holds (Faust's
        ``_on_changelog_sent``), so a restart that kept its volume replays only the tail."""
        store = self.table.data
        if isinstance(store, RocksDBStore):
            store.set_persisted_offset(TP(self.changelog, partition), offset)

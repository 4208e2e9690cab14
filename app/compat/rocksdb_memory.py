"""Faust's RocksDB options (``faust.stores.rocksdb.RocksDBOptions``): one memory budget per worker,
shared by every table partition it opens.

:class:`SharedBudgetOptions` is the options class of every RocksDB store etj's tables open
(:func:`app.compat.stores.share_budgets`, from the tables' ``_new_store_by_url``: the app's
``Table`` setting is :class:`app.compat.stores.EtjTable`), so upstream's class is left as it
is. The budgets are made once per process by :func:`configure` (``app.main``). Upstream's
other options (bloom filter, index type, file sizes) are kept; ``ETJ_ROCKSDB_WRITE_BUFFER_MB``
still sizes each memtable. The python-rocksdb driver (not installed by etj) is left as Faust
configures it.
"""

from __future__ import annotations

from typing import Any

import rocksdict
from faust.stores.rocksdb import RocksDBOptions

from app.compat.upstream import replaces

__all__ = ["SharedBudgetOptions", "configure", "shared", "usage"]

#: (block cache, write buffer manager) of this process, once installed
_shared: tuple[Any, Any] | None = None
#: the block cache's capacity in bytes (rocksdict's Cache does not say it)
_cache_bytes = 0


def shared() -> tuple[Any, Any] | None:
    """The process's (block cache, write buffer manager); None until :func:`configure`."""
    return _shared


def usage() -> dict[str, int]:
    """Bytes in use: ``memtables`` (the write buffer manager's count) and ``block_cache``
    (index and filter blocks included), with their budgets; empty before :func:`configure` (the
    gauge ``etj_rocksdb_memory_bytes``, ``GET /stats/``)."""
    if _shared is None:
        return {}
    cache, buffers = _shared
    return {
        "memtables": buffers.get_usage(),
        "memtables_budget": buffers.get_buffer_size(),
        "block_cache": cache.get_usage(),
        "block_cache_budget": _cache_bytes,
    }


class SharedBudgetOptions(RocksDBOptions):
    """Faust's RocksDB options, with the worker's shared cache and write buffer manager."""

    @replaces("faust.stores.rocksdb:RocksDBOptions.as_options", "844b0de36bc6")
    def as_options(self) -> Any:
        """Every RocksDB database of the process shares one block cache and one memtable
        budget, instead of one of each per table partition.

        Upstream: with the rocksdict driver, ``as_options`` gives each table partition's
        database a block cache of its own (``rocksdict.Cache(block_cache_size)``) and memtables
        of its own. A worker opens one database per table and partition it owns or has owned
        (eleven tables: 44 databases for the default four partitions).

        Symptom: what RocksDB may hold grew with the partitions a worker took over: in the
        10-minute chaos run the processes that took over a killed worker's partitions grew
        their RSS ×1.5–1.8, the others ×1.0–1.2 (run 15), with per-partition sizes already
        down from Faust's 64 MiB memtables and 2 GiB caches.

        Here RocksDB's own way to bound many databases in one process
        (https://github.com/facebook/rocksdb/wiki/Write-Buffer-Manager): one LRU block cache
        of ``ETJ_ROCKSDB_BLOCK_CACHE_MB``, which also holds the index and filter blocks
        (``cache_index_and_filter_blocks``: otherwise they grow with the files, unbounded), and
        one write buffer manager of ``ETJ_ROCKSDB_MEMTABLES_MB`` (RocksDB flushes a memtable
        when all together pass it; it never stalls writers). Upstream's options are built
        first, then only the table factory's cache and the write buffer manager replaced.

        Test: tests/unit/test_rocksdb_memory.py::test_databases_opened_through_faust_share_the_workers_memory_budgets

        Remove when: Faust can pass a shared cache (it builds a new ``Cache`` in ``as_options``
        in 0.15.3).
        """
        options = RocksDBOptions.as_options(self)
        if not self.use_rocksdict or _shared is None:
            return options
        cache, buffers = _shared
        table = rocksdict.BlockBasedOptions()  # as Faust's, with the shared cache
        table.set_bloom_filter(self.bloom_filter_size, block_based=True)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        table.set_block_cache(cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)  # the hot ones stay, as before
        options.set_block_based_table_factory(table)
        options.set_write_buffer_manager(buffers)
        return options


def configure(block_cache_mb: int, memtables_mb: int) -> None:
    """Every RocksDB database etj's tables open from now on shares these budgets (MiB);
    idempotent (the first budgets stay: databases already open use them)."""
    global _shared, _cache_bytes
    if _shared is None:
        _cache_bytes = block_cache_mb << 20
        _shared = (
            rocksdict.Cache(_cache_bytes),
            rocksdict.WriteBufferManager(memtables_mb << 20, False),
        )

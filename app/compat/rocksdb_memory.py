"""One RocksDB memory budget per worker, shared by every table partition it opens.

Upstream (faust-streaming 0.15.3, ``faust.stores.rocksdb.RocksDBOptions.as_options``, rocksdict
driver): each table partition's database gets a block cache of its own
(``rocksdict.Cache(block_cache_size)``) and memtables of its own. A worker opens one database
per table and partition it owns or has owned (eleven tables: 44 databases for the default four
partitions), so what RocksDB may hold grows with the partitions a worker takes over. Symptom:
in the 10-minute chaos run the processes that took over a killed worker's partitions grew their
RSS ×1.5–1.8 while those that did not stayed near ×1.0–1.2 (run 15), with per-partition sizes
already down from Faust's 64 MiB memtables and 2 GiB caches (docs/operating/scaling.md#memory).

The patch gives every database of the process the same two budgets, RocksDB's own way to bound
many databases in one process (https://github.com/facebook/rocksdb/wiki/Write-Buffer-Manager):

- one LRU block cache of ``ETJ_ROCKSDB_BLOCK_CACHE_MB``, which also holds the index and filter
  blocks (``cache_index_and_filter_blocks``: otherwise they sit outside any bound and grow with
  the files);
- one write buffer manager of ``ETJ_ROCKSDB_MEMTABLES_MB``: when all memtables together pass it,
  RocksDB flushes one (it never stalls writers: ``allow_stall`` off).

``ETJ_ROCKSDB_WRITE_BUFFER_MB`` still sizes each memtable (Faust's ``write_buffer_size``). The
rest of Faust's options (bloom filter, index type, file sizes) is kept: the patch wraps
``as_options`` and replaces only the table factory's cache and the write buffer manager. The
python-rocksdb driver (not installed by etj) is left as Faust configures it.

Tests: tests/unit/test_rocksdb_memory.py (every database opened through Faust's options uses the
one cache and write buffer manager, their usage stays within the budgets while many databases
are written, and the rows read back). Remove when Faust can pass a shared cache (it cannot in
0.15.3: it builds a new ``Cache`` in ``as_options``).
"""

from __future__ import annotations

from typing import Any

import rocksdict
from faust.stores.rocksdb import RocksDBOptions

__all__ = ["install", "shared", "usage"]

_original = RocksDBOptions.as_options
#: (block cache, write buffer manager) of this process, once installed
_shared: tuple[Any, Any] | None = None
#: the block cache's capacity in bytes (rocksdict's Cache does not say it)
_cache_bytes = 0


def shared() -> tuple[Any, Any] | None:
    """The process's (block cache, write buffer manager); None until :func:`install`."""
    return _shared


def usage() -> dict[str, int]:
    """Bytes in use: ``memtables`` (the write buffer manager's count) and ``block_cache``
    (index and filter blocks included), with their budgets; empty before :func:`install` (the
    gauge ``etj_rocksdb_memory_bytes``, ``GET /stats/``)."""
    if _shared is None:
        return {}
    cache, buffers = _shared
    return {"memtables": buffers.get_usage(), "memtables_budget": buffers.get_buffer_size(),
            "block_cache": cache.get_usage(), "block_cache_budget": _cache_bytes}


def _as_options(self: RocksDBOptions) -> Any:
    options = _original(self)
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


def install(block_cache_mb: int, memtables_mb: int) -> None:
    """Every RocksDB database Faust opens from now on shares these budgets (MiB); idempotent
    (the first budgets stay: databases already open use them)."""
    global _shared, _cache_bytes
    if _shared is None:
        _cache_bytes = block_cache_mb << 20
        _shared = (rocksdict.Cache(_cache_bytes),
                   rocksdict.WriteBufferManager(memtables_mb << 20, False))
    RocksDBOptions.as_options = _as_options  # type: ignore[method-assign]

"""Every table's RocksDB memory is bounded by the settings, not Faust's defaults.

Faust opens each table partition's RocksDB with a 64 MiB memtable (three of them at most) and a
2 GiB block cache of its own; a worker owning tens of table partitions grew its RSS for as long
as it ran (the 10-minute chaos run: ×2–3 per process). ``ETJ_ROCKSDB_WRITE_BUFFER_MB`` sizes each
memtable; the block cache and the memtables' total are one budget per worker
(:mod:`app.compat.rocksdb_memory`, tests/unit/test_rocksdb_memory.py;
docs/operating/scaling.md#memory).
"""

from __future__ import annotations

from app import topology  # noqa: F401  (declares every table)
from app.faust_app import app, settings


def test_every_table_opens_rocksdb_with_the_configured_memtables():
    tables = list(app.tables.values())
    assert len(tables) >= 9  # the mood and movie joins' three each, the car join's three
    for table in tables:
        options = table._new_store_by_url("rocksdb://").rocksdb_options  # opens no database
        assert options.write_buffer_size == settings.rocksdb_write_buffer_mb << 20, table.name
        assert options.max_write_buffer_number == 2, table.name

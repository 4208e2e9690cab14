"""app.compat.rocksdb_memory: every RocksDB database etj's tables open shares one block cache and one
memtable budget (the worker's), instead of one of each per table partition."""

from __future__ import annotations

from faust.stores.rocksdb import RocksDBOptions

from app.compat import rocksdb_memory
from app.compat.rocksdb_memory import SharedBudgetOptions
from app.faust_app import settings

MB = 1 << 20


def test_databases_opened_through_faust_share_the_workers_memory_budgets(tmp_path):
    if rocksdb_memory.shared() is None:  # else installed by the app already, same settings
        rocksdb_memory.configure(settings.rocksdb_block_cache_mb, settings.rocksdb_memtables_mb)
    cache, buffers = rocksdb_memory.shared()
    budget = buffers.get_buffer_size()
    assert budget == settings.rocksdb_memtables_mb * MB
    # as Faust opens a table partition (faust.stores.rocksdb.Store._open_for_partition)
    options = SharedBudgetOptions(
        write_buffer_size=4 * MB, max_write_buffer_number=2, use_rocksdict=True
    )
    dbs = [options.open(tmp_path / f"table-{i}.db") for i in range(12)]
    value = b"x" * 200
    per_db = (budget * 2) // len(dbs) // len(value)  # twice the budget in all, 8 MB+ per db
    peak = 0
    for j in range(per_db):
        key = b"k%08d" % j
        for db in dbs:
            db[key] = value
        if j % 2000 == 0:
            peak = max(peak, buffers.get_usage())
    peak = max(peak, buffers.get_usage())
    # the manager counts these databases' memtables (Faust alone attaches none: 0), and keeps
    # them near its budget (each database also holds one arena block of its current memtable)
    assert 0 < peak <= budget + len(dbs) * MB, (peak, budget)
    for db in dbs:  # nothing lost to the flushes it forces
        assert db[b"k%08d" % 0] == value and db[b"k%08d" % (per_db - 1)] == value
    assert cache.get_usage() > 0  # the flushed files' index and filter blocks, in the shared cache
    for db in dbs:
        db.close()


def test_every_rocksdb_store_of_etjs_tables_uses_the_shared_budgets(tmp_path):
    import faust

    from app.compat.stores import EtjTable, RangeTable
    from app.state.range_scan import range_table

    app = faust.App("t-budgets", store="rocksdb://", datadir=str(tmp_path), Table=EtjTable)
    plain = app.Table("plain", default=None)
    ranged = range_table(app, "ranged", default=None, table_class=RangeTable)
    for table in (plain, ranged):
        options = table.data.rocksdb_options
        assert type(options) is SharedBudgetOptions
        assert options.use_rocksdict and options.write_buffer_size > 0  # Faust's own options
    assert (
        type(
            faust.App("t-plain", store="rocksdb://", datadir=str(tmp_path))
            .Table("p", default=None)
            .data.rocksdb_options
        )
        is RocksDBOptions
    )  # upstream's, untouched

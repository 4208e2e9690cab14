"""The tables' state below the join rules: how a batch reads and writes rows, how rows are
found in order, and how a worker's local state is trusted, saved and restored.

In the order a record's batch meets them:

- :mod:`app.state.overlay` — a batch's reads and writes of one table: each row read once, its
  changelog row written once at the batch's end;
- :mod:`app.state.store_io` — a table's local store read and written directly: a row, a
  batch's rows, a key range in order, the row at a range's edge; a memory store's rows kept
  by kind in :mod:`app.state.split_sorted`;
- :mod:`app.state.range_scan` — ordered range scans over a table (the car join's zone index,
  the per-join layout's rows), over :mod:`app.state.ordered_keys` — byte keys whose byte order
  is numeric order;
- :mod:`app.state.crash_marker` — the RocksDB state on a worker's disk is trusted after a clean
  stop only (a marker file claimed at start, released at a clean stop);
- :mod:`app.state.snapshot_service` — snapshots of table partitions taken on a timer, and
  installed before Faust opens a partition it has no local state for; through
  :mod:`app.state.snapshot_store` — the snapshots in object storage (no Faust import: the batch
  twin's bootstrap executors write them).

What the tables are (their names, keys and rows per join) is :mod:`app.joins`; how Faust's stores
are opened, and the accessors of their private attributes, :mod:`app.compat.stores`.
"""

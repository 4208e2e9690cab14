"""How often the worker's cyclic garbage collector runs: less often than CPython's default.

Why: a worker builds large, long-lived tables in memory (a memory store's rows are lists and
dicts, all tracked by the collector) and allocates a few short-lived containers per record.
CPython 3.11's default thresholds (700, 10, 10) collect the youngest generation every 700
allocations and traverse the older ones often enough that, while a 1M-key table was replayed,
``gc_collect_main`` was 15 % of the main thread (py-spy ``--native``) — and replay is bound by
that thread. Table rows form no reference cycles: they are freed by reference counting when
replaced or deleted, whatever the thresholds; only cyclic garbage (asyncio's futures and
exceptions, mostly) waits longer for a collection, in a generation 0 of at most
:data:`THRESHOLDS`'s first figure.

Measured (2 cores, ``bench.recovery``'s 1M-key changelog, process start to ready): 26.6 s with
the default thresholds, 23.5 s with these, 22.4 s with the collector off; ``bench.throughput``
1-5 % more records/s (two runs each, interleaved). The collector stays on: a worker runs for
weeks.
"""

from __future__ import annotations

import gc

#: (generation 0 allocations, generation 0 runs per generation 1 run, generation 1 runs per
#: generation 2 run); CPython's default is (700, 10, 10)
THRESHOLDS = (10_000, 10, 10)


def use() -> tuple[int, int, int]:
    """Set the collector's thresholds to :data:`THRESHOLDS`; the ones in force after."""
    gc.set_threshold(*THRESHOLDS)
    return gc.get_threshold()

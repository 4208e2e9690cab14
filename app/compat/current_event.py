"""Handle a record as Faust's *current event*, whichever record the stream last delivered.

Upstream (faust-streaming 0.15.3): a table finds the partition of a row from the current event
(``faust.streams.current_event()``, a context variable the stream sets to the record it hands
the agent): the RocksDB store reads and writes that partition's database
(``faust.stores.rocksdb.Store._get`` / ``_set``), and a changelog row goes to that partition
(``Table.partition_for_key``, used by :mod:`app.compat.write_behind`). An agent that handles
only what it was just handed never notices.

etj's loop does not: flow control (:mod:`app.flow_control`) holds records back and lets them go
later, and a tick of one partition lets go of the held records of *every* partition whose wait
has timed out. Handled while the tick was current, a mood of partition 1 went into partition
0's history database and changelog: partition 1's recommendations answered "no mood", and a
recovery of partition 1 never had it. Found by the 10-minute chaos run with producer batching
(19 answers "no mood", never corrected); test: tests/agent/test_revoke.py (a held record let
go by another partition's tick keeps its own partition).

:func:`as_current` makes the record being handled the current event for as long as it is
handled. It sets Faust's private context variable (the same one ``Stream`` sets), so it is
tested against the exact versions of :mod:`app.compat.versions`. Remove when Faust's tables take
the partition from the caller (they do not in 0.15.3).
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Any, Iterator

from faust.streams import _current_event, current_event

__all__ = ["as_current"]


@contextmanager
def as_current(event: Any) -> Iterator[None]:
    """Within the block, Faust's tables see ``event`` as the current event."""
    if current_event() is event:
        yield
        return
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)

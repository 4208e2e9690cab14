"""The commit rule of app.compat.rebalance: never past the first offset that was not handled."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from intervaltree import IntervalTree

from app.compat.rebalance import _new_offset

TP = ("inputs", 0)


def consumer(committed, acked, gaps=()):
    c = SimpleNamespace(_acked=defaultdict(list), _acked_index=defaultdict(set),
                        _gap=defaultdict(IntervalTree), _committed_offset=defaultdict(lambda: None))
    c._committed_offset[TP] = committed
    c._acked[TP] = list(acked)
    c._acked_index[TP] = set(acked)
    for a, b in gaps:
        c._gap[TP].addi(a, b)
    return c


def test_an_offset_never_acked_stops_the_commit():
    # Faust's own rule commits 13 here: offset 10 (the committed one, next to handle) is lost
    c = consumer(10, [11, 12])
    assert _new_offset(c, TP) is None
    assert c._acked[TP] == [11, 12]


def test_the_run_of_acked_offsets_from_the_committed_one_is_committed():
    c = consumer(10, [13, 10, 11])
    assert _new_offset(c, TP) == 12
    assert c._acked[TP] == [13]


def test_repeats_and_offsets_already_committed_do_not_break_the_run():
    assert _new_offset(consumer(10, [8, 9, 10, 10, 11]), TP) == 12


def test_a_gap_counts_as_handled():
    # offsets 11-12 are not in the log (a transaction marker, compaction)
    assert _new_offset(consumer(10, [10, 13], gaps=[(11, 13)]), TP) == 14

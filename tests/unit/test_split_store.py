"""app.state.split_sorted.SplitSortedDict: a join table's rows in the memory store (id rows by point,
a key's joins per key, the expiry index sorted) answer every write, read and range scan as one
sorted mapping would (id rows aside: they are never scanned)."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from app.joins.joins_table import JoinsTable
from app.joins.keys import expiry_key, id_key, join_key, join_range, version_key, version_range
from app.state.split_sorted import SplitSortedDict


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.booleans(), st.booleans())
def test_it_answers_as_one_sorted_mapping(seed, by_first_byte, group_end):
    rng = random.Random(seed)
    d = SplitSortedDict(
        JoinsTable.point_key,
        JoinsTable.group_key,
        by_first_byte,
        JoinsTable.group_end if group_end else None,
    )
    ref: dict[bytes, int] = {}
    for i in range(400):
        k = rng.choice(["ann", "bob", "c", "annx", ""])
        t, jid = rng.randint(0, 50), f"j{rng.randint(0, 30)}"
        key = rng.choice(
            [
                join_key(k, t, jid),
                id_key(k, jid),
                expiry_key(rng.randint(0, 3), t, k),
                version_key(k, t, [jid]),
            ]
        )
        if rng.random() < 0.3:
            assert d.pop(key, None) == ref.pop(key, None)
        elif rng.random() < 0.1 and key in ref:
            del d[key]
            del ref[key]
        else:
            d[key] = ref[key] = i
    assert len(d) == len(ref) and all(d[k] == v for k, v in ref.items())
    assert sorted(d) == sorted(ref)
    for k in ["ann", "bob", "c", "annx", ""]:
        for (lo_t, hi_t), rng_of in itertools.product(
            [(None, None), (5, 20), (0, 1), (30, None)], (join_range, version_range)
        ):
            lo, hi = rng_of(k, lo_t, hi_t)
            assert list(d.irange(lo, hi, inclusive=(True, False))) == sorted(
                x for x in ref if lo <= x < hi
            )
            # the scan's (key, value) pairs, values read from the key's own mapping
            inside = [(x, ref[x]) for x in sorted(ref) if lo <= x < hi]
            assert d.items_range(lo, hi) == inside
            assert d.edge_item(lo, hi, False) == (inside[0] if inside else None)
            assert d.edge_item(lo, hi, True) == (inside[-1] if inside else None)
    scanned = [x for x in sorted(ref) if x[:1] != b"I"]
    assert list(d.irange(b"A", b"Z", inclusive=(True, False))) == scanned

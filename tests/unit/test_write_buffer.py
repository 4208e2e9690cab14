"""app.state.write_buffer: a batch's writes to an ordered table on RocksDB, kept and merged into
its reads. Against a model (a dict, sorted when read): any mix of writes, deletions and
batch ends, every edge, range and run read answers what the model holds, and the store holds
the model after each batch's rows are written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import rocksdict
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.joins.joins_table import JoinsTable
from app.state.write_buffer import WriteBuffer

DELETED = object()
SKIP = b"__skip__"  # a store row that is no table row (Faust's offset row)
# keys of three kinds, as a join's table has them: grouped (J/V + a key), point (I), the rest (X)
KEYS = (
    [
        kind + len(k).to_bytes(4, "big") + k + bytes([t])
        for kind in (b"J", b"V")
        for k in (b"a", b"ab")
        for t in (1, 2, 3, 5)
    ]
    + [b"I\x00\x00\x00\x01a" + bytes([t]) for t in (1, 2)]
    + [b"X" + bytes([t]) for t in (1, 2, 9)]
)


def group_of(key: bytes) -> bytes | None:
    return JoinsTable.group_key(key)


def bounds() -> st.SearchStrategy[tuple[bytes, bytes | None, bytes | None]]:
    """(lo, hi, group) of a read: within one group (the engine's reads), or any range."""
    groups = sorted({g for g in map(group_of, KEYS) if g is not None})
    inside = st.sampled_from(groups).flatmap(
        lambda g: st.tuples(
            st.sampled_from([g, g + b"\x01", g + b"\x03"]),
            st.sampled_from([g + b"\x02", g + b"\x05", g + b"\x09", g[:-1] + bytes([g[-1] + 1])]),
            st.just(g),
        )
    )
    # (from J on: point rows, I, are never range-read; the memory store keeps them apart)
    anywhere = st.tuples(
        st.sampled_from([b"J", b"V", b"X", b"X\x02"]),
        st.sampled_from([None, b"K", b"W", b"X\x05", b"Y"]),
        st.just(None),
    )
    return st.one_of(inside, anywhere).filter(lambda b: b[1] is None or b[0] <= b[1])


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS), st.integers(0, 9)),
        st.tuples(st.just("delete"), st.sampled_from(KEYS), st.just(0)),
        st.tuples(st.just("end"), st.just(b""), st.just(0)),
        st.tuples(st.just("read"), bounds(), st.integers(1, 3)),
    ),
    max_size=60,
)


@pytest.mark.unit
@hsettings(max_examples=300, deadline=None)
@given(ops=ops)
def test_reads_merge_the_batch_into_the_store_as_a_model_says(tmp_path_factory, ops):
    path: Path = tmp_path_factory.mktemp("wb") / "db"
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    db[SKIP] = b"0"
    buf = WriteBuffer(
        lambda p: db, orjson.loads, DELETED, SKIP, JoinsTable.point_key, group_of, True
    )
    model: dict[bytes, Any] = {}

    def rows(lo: bytes, hi: bytes | None) -> list[tuple[bytes, Any]]:
        return sorted((k, v) for k, v in model.items() if k >= lo and (hi is None or k < hi))

    try:
        for op, arg, n in ops:
            if op == "put":
                buf.put(0, arg, [n], group_of(arg) if n % 2 else None)
                model[arg] = [n]
            elif op == "delete":
                buf.put(0, arg, DELETED)
                model.pop(arg, None)
            elif op == "end":
                batch = rocksdict.WriteBatch(raw_mode=True)
                for k, v in buf.take().get(0, {}).items():
                    if v is DELETED:
                        batch.delete(k)
                    else:
                        batch.put(k, orjson.dumps(v))
                db.write(batch)
            else:
                lo, hi, group = arg
                want = rows(lo, hi)
                assert buf.scan(0, lo, hi, group) == want
                assert buf.scan(0, lo, hi, group, n) == want[:n]
                if group is not None:
                    assert buf.edge(0, lo, hi, False, group) == (want[0] if want else None)
                    assert buf.edge(0, lo, hi, True, group) == (want[-1] if want else None)
                    for last in (False, True):
                        run = buf.run(0, lo, hi, last, len(group) + 1, group)
                        if not want:
                            assert run == []
                        else:
                            pre = (want[-1] if last else want[0])[0][: len(group) + 1]
                            assert run == [r for r in want if r[0].startswith(pre)]
            for k, v in model.items():
                got_v = buf.get(0, k, None)
                if got_v is None:
                    raw = db.get(k)
                    got_v = None if raw is None else orjson.loads(raw)
                assert got_v == v
    finally:
        buf.clear()

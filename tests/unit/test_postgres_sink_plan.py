"""The sink's batch rule (app.downstream.postgres_sink.plan_batch), without a database: per
join id its highest revision in the batch, tombstones, rejects with their reasons."""

from __future__ import annotations

import json

import pytest

from app.downstream.postgres_sink import create_sql, plan_batch, table_name_for


def rec(jid: str, n: int) -> bytes:
    return json.dumps({"id": jid, "revision": n, "mood": f"m{n}"}).encode()


def test_a_batch_keeps_each_id_s_highest_revision_whatever_the_order():
    plan = plan_batch(
        [
            (0, 0, b"b", rec("b", 1)),
            (0, 1, b"b", rec("b", 3)),
            (1, 0, b"a", rec("a", 2)),
            (0, 2, b"b", rec("b", 2)),
        ]
    )  # 2 again: a repeat
    assert [(u.id, u.revision, u.partition, u.offset) for u in plan.upserts] == [
        ("a", 2, 1, 0),
        ("b", 3, 0, 1),
    ]  # by id: the lock order of every sink
    assert plan.deletes == [] and plan.rejected == []


def test_a_tombstone_deletes_unless_a_revision_follows_it_in_the_batch():
    plan = plan_batch(
        [
            (0, 0, b"a", rec("a", 1)),
            (0, 1, b"a", None),
            (0, 2, b"b", None),
            (0, 3, b"b", rec("b", 4)),
        ]
    )
    assert plan.deletes == ["a"]
    assert [(u.id, u.revision) for u in plan.upserts] == [("b", 4)]


@pytest.mark.parametrize(
    "value, reason",
    [
        (b"{oops", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"revision": 1}', "no join id"),
        (b'{"id": "x", "revision": 0}', "no revision number"),
        (b'{"id": "x", "revision": "2"}', "no revision number"),
        (b'{"id": "x", "revision": true}', "no revision number"),
    ],
)
def test_a_record_that_is_not_a_revision_is_rejected_with_its_reason(value, reason):
    plan = plan_batch([(3, 7, b"k", value)])
    [r] = plan.rejected
    assert (r.partition, r.offset, r.key, r.value) == (3, 7, b"k", value)
    assert r.reason.startswith(reason) and plan.upserts == []


def test_the_table_name_is_a_plain_identifier():
    assert table_name_for("my-join.v2") == "etj_my_join_v2"
    assert "etj_moods_rejected" in create_sql("etj_moods")[1]
    with pytest.raises(ValueError):
        create_sql('x"; DROP TABLE y; --')

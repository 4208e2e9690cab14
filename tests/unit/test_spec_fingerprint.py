"""A spec's fingerprint, kept with its clock (app.joins.fingerprint): which changes of a spec the
state already written reads right under (and so are allowed), which not (a worker refuses them
in one line), and the rows a join writes and reads for it (docs/operating/runbook.md#change-a-spec)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.joins.fingerprint import SpecChangeError, SpecGuard, changes, fingerprint, spec_row_key
from app.joins.joins_table import joins_overlay
from app.joins.resolve import resolve
from app.joins.state import JoinState
from app.logic.event_join import Event
from app.state.overlay import MemoryIO, Overlay

#: the worked example's spec (docs/joins/declarative.md#worked-example-adding-a-third-join)
TIERS: dict[str, Any] = {
    "name": "tiers",
    "events": {
        "topic": "etj-page-views",
        "key": "user_id",
        "time": "event_time",
        "id": "id",
        "fields": {
            "id": "str",
            "user_id": "str",
            "page": "str",
            "referrer": "str?",
            "event_time": "time",
        },
        "copy": ["user_id", "page", "event_time"],
    },
    "dimension": {
        "topic": "etj-user-tiers",
        "key": "user_id",
        "time": "event_time",
        "fields": {"user_id": "str", "tier": "str", "level": "int", "event_time": "time"},
        "copy": ["tier"],
        "time_as": "tier_event_time",
    },
    "output": "etj-tiered-page-views",
    "ticks": "etj-tiers-ticks",
    "mode": "left",
    "asof": "before",
    "retention_ms": 86_400_000,
}


def tiers(**changes: Any) -> dict[str, Any]:
    """The spec with ``side__key=value`` changes (``...``: removed)."""
    raw = copy.deepcopy(TIERS)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = raw
        for p in parents:
            node = node[p]
        if value is ...:
            del node[leaf]
        else:
            node[leaf] = value
    return raw


def fp(raw: dict[str, Any]) -> dict[str, Any]:
    return fingerprint(resolve(raw), 4)


def judged(**change: Any) -> list[tuple[str, bool]]:
    """(key, compatible) of each key a change of the spec changes."""
    return [(c.key, c.compatible) for c in changes(fp(TIERS), fp(tiers(**change)))]


def test_the_fingerprint_holds_the_keys_that_shape_the_state_rows():
    assert fp(TIERS) == {
        "version": 1,
        "events.input": "etj-page-views",
        "events.key": "user_id",
        "events.key_kinds": ["str"],
        "events.key_format": "str",
        "events.format": "json",
        "events.time": "event_time",
        "events.time_format": "epoch_ms",
        "events.copy": ["user_id", "page", "event_time"],
        "events.copy_types": {"user_id": "str", "page": "str", "event_time": "int"},
        "events.id": "id",
        "dimension.input": "etj-user-tiers",
        "dimension.key": "user_id",
        "dimension.key_kinds": ["str"],
        "dimension.key_format": "str",
        "dimension.format": "json",
        "dimension.time": "event_time",
        "dimension.time_format": "epoch_ms",
        "dimension.copy": ["tier"],
        "dimension.copy_types": {"tier": "str"},
        "ticks": "etj-tiers-ticks",
        "partitions": 4,
        "mode": "left",
        "asof": "before",
        "retention_ms": 86_400_000,
        "window_ms": None,
        "hold_ms": None,
        "late_dimensions": True,
        "review_lag_ms": None,
        "finality": False,
        "emit": "all",
    }


def test_what_only_the_output_or_the_start_says_is_no_change():
    assert judged(dimension__time_as="tier_time") == []
    assert judged(output="etj-other-output") == []
    assert judged(start="latest") == []
    assert judged(dimension__copy=[{"tier": "level_name"}]) == []  # a rename: the same column
    assert judged(layout="per-key") == []


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"dimension__copy": ["tier", "level"]}, "dimension.copy"),  # a new field at the end
        ({"dimension__copy": ["level"]}, "dimension.copy"),
        ({"events__copy": ["user_id", "page", "event_time", "referrer"]}, "events.copy"),
        ({"mode": "inner"}, "mode"),
        ({"asof": "at-or-before-else-earliest"}, "asof"),
        ({"events__id": ...}, "events.id"),
        ({"events__key": "page"}, "events.key"),
        ({"events__time_format": "epoch_s"}, "events.time_format"),
        ({"events__key_format": "json", "dimension__key_format": "json"}, "events.key_format"),
        ({"events__topic": "etj-page-views-v2"}, "events.input"),
        ({"ticks": "etj-tiers-ticks-2"}, "ticks"),
        ({"emit": "final"}, "emit"),
    ],
)
def test_a_change_of_the_rows_columns_keys_or_rules_is_incompatible(change, key):
    assert (key, False) in judged(**change)


def test_a_copied_field_of_another_type_is_incompatible():
    changed = tiers(dimension__fields={**TIERS["dimension"]["fields"], "tier": "int"})
    assert [(c.key, c.compatible) for c in changes(fp(TIERS), fp(changed))] == [
        ("dimension.copy_types", False)
    ]


def test_the_events_copy_may_move_or_add_fields_outside_the_payload_while_the_ids_stay():
    # the payload slot (page) stays: only the output's order changes; the ids are the events'
    assert judged(events__copy=["page", "user_id", "event_time"]) == [("events.copy", True)]
    assert judged(events__copy=["page", "event_time"]) == [("events.copy", True)]
    # without an id, the join id digests the copied values in order: every change moves it
    derived = tiers(events__id=...)
    moved = tiers(events__id=..., events__copy=["page", "user_id", "event_time"])
    assert [(c.key, c.compatible) for c in changes(fp(derived), fp(moved))] == [
        ("events.copy", False)
    ]


@pytest.mark.parametrize(
    ("change", "compatible"),
    [
        ({"retention_ms": 2 * 86_400_000}, True),
        ({"retention_ms": 3_600_000}, True),
        ({"window_ms": 3_600_000}, True),
        ({"late_dimensions": False}, True),
        ({"review_lag_ms": 60_000}, True),
        ({"hold_ms": 5_000}, True),
        ({"finality": True}, True),
        ({"dimension__format": "avro"}, True),  # the rows hold the values decoded
    ],
)
def test_rules_judged_per_record_may_change(change, compatible):
    [(key, ok)] = judged(**change)
    assert ok is compatible, key


def test_a_hold_may_change_but_not_go_and_finality_may_start_but_not_stop():
    held, other = fp(tiers(hold_ms=5_000)), fp(tiers(hold_ms=9_000))
    assert [c.compatible for c in changes(held, other)] == [True]
    assert [c.compatible for c in changes(held, fp(TIERS))] == [False]
    final = fp(tiers(finality=True))
    assert [c.compatible for c in changes(final, fp(TIERS))] == [False]


def test_keys_one_side_does_not_know_are_not_compared():
    older = {k: v for k, v in fp(TIERS).items() if k != "review_lag_ms"}
    assert changes(older, fp(tiers(review_lag_ms=1))) == []
    newer = {**fp(TIERS), "formats": {"events": "avro"}}
    assert changes(newer, fp(TIERS)) == []


def test_the_refusal_is_one_line_naming_the_spec_what_changed_and_the_ways_forward():
    guard = SpecGuard(resolve(tiers(dimension__copy=["tier", "level"])), 4)
    with pytest.raises(SpecChangeError) as exc:
        guard.check(2, {"spec": fp(TIERS), "late_before": None}, 5_000)
    assert str(exc.value) == (
        "etj refuses to run join 'tiers': partition 2's state was written by another spec, and "
        'this change cannot read it: dimension.copy: ["tier"] -> ["tier", "level"]. Either run '
        'the new spec under a new ETJ_APP_ID with "start" (blue/green), or rebuild this app '
        "id's state from its inputs (docs/operating/runbook.md#change-a-spec); or restore the "
        "spec that wrote it"
    )
    assert "\n" not in str(exc.value)


def test_a_refusal_goes_through_the_workers_hook_first():
    said: list[str] = []
    guard = SpecGuard(resolve(tiers(mode="inner")), 4, on_refusal=said.append)
    with pytest.raises(SpecChangeError):
        guard.check(0, {"spec": fp(TIERS), "late_before": None}, None)
    assert said and 'mode: "left" -> "inner"' in said[0]


def test_a_state_without_a_fingerprint_gets_one_and_a_compatible_change_gets_the_new_one():
    guard = SpecGuard(resolve(TIERS), 4)
    assert guard.check(0, None, 1_000) == ({"spec": fp(TIERS), "late_before": None}, None)
    assert guard.check(0, {"spec": fp(TIERS), "late_before": None}, 1_000) == (None, None)
    told: list[str] = []
    longer = SpecGuard(resolve(tiers(retention_ms=3 * 86_400_000)), 4, on_change=told.append)
    clock = 10 * 86_400_000
    row, late_before = longer.check(0, {"spec": fp(TIERS), "late_before": None}, clock)
    # what the old retention purged stays late until the new horizon passes the old one's
    assert late_before == clock - 86_400_000
    assert row == {"spec": longer.fingerprint, "late_before": late_before}
    assert "retention_ms: 86400000 -> 259200000" in told[0]
    assert longer.check(0, row, clock + 5) == (None, late_before)


# --- the rows: a join's state over memory stores, as the engine drives it ----------------------


def state(raw: dict[str, Any], clock: MemoryIO, guard: SpecGuard | None = None) -> JoinState:
    return JoinState(
        resolve(raw),
        Overlay(MemoryIO(bytes_keys=False)),
        joins_overlay(MemoryIO()),
        Overlay(clock),
        guard=guard or SpecGuard(resolve(raw), 4),
    )


def test_the_first_clock_read_of_a_batch_checks_and_writes_the_partitions_fingerprint():
    clock = MemoryIO(bytes_keys=False)
    s = state(TIERS, clock)
    s.stream_time(0)
    s.advance(0, 1_000)
    s.on_event(0, Event("u1", "v1", 1_000, ("/",)), None, None)
    s.end_batch()
    s.clock.flush()
    assert clock.get(0, 0) == 1_000
    assert clock.get(0, spec_row_key(0)) == {"spec": fp(TIERS), "late_before": None}
    assert clock.get(1, spec_row_key(1)) is None  # only the partitions it read

    changed = state(tiers(dimension__copy=["tier", "level"]), clock)
    with pytest.raises(SpecChangeError, match="partition 0's state"):
        changed.stream_time(0)
    assert changed.stream_time(1) is None  # a partition with no state: it gets this spec's


def test_a_longer_retention_keeps_what_the_old_one_let_go_late():
    clock = MemoryIO(bytes_keys=False)
    s = state(TIERS, clock)
    s.stream_time(0)
    s.advance(0, 10 * 86_400_000)
    s.end_batch()
    s.clock.flush()
    longer = state(tiers(retention_ms=3 * 86_400_000), clock)
    assert longer.stream_time(0) == 10 * 86_400_000
    assert longer.late_before == {0: 9 * 86_400_000}
    longer.end_batch()
    longer.clock.flush()
    again = state(tiers(retention_ms=3 * 86_400_000), clock)
    again.stream_time(0)
    assert again.late_before == {0: 9 * 86_400_000}  # kept with the fingerprint


def test_a_key_that_becomes_an_int_or_composite_is_refused_its_copies_are_in_the_payload():
    """An int or composite key's copies sit in the join rows' payload (a str key's do not): a
    key changed to one moves the payload's columns, and its kinds are kept."""
    as_int = {"id": "str", "user_id": "int", "page": "str", "event_time": "time"}
    dim_int = {"user_id": "int", "tier": "str", "event_time": "time"}
    got = dict(judged(events__fields=as_int, dimension__fields=dim_int))
    assert got["events.key_kinds"] is False and got["dimension.key_kinds"] is False
    assert got["events.copy_types"] is False  # the key's column changed type
    both = tiers(events__fields=as_int, dimension__fields=dim_int)
    assert [c.key for c in changes(fp(both), fp(both))] == []

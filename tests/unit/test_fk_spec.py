"""Foreign-key specs (``"kind": "foreign-key"``, app/joins/fk_spec.py): what resolves, what each
mistake is told (naming the spec and the field), the move and output records, the index keys of
non-int keys (app/joins/fk_state.py) and the rules over string keys (app/logic/fk_join.py)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from app.joins.catalog import car_spec, load_all, mood_spec
from app.joins.fk_spec import check_together, resolve_fk
from app.joins.fk_state import INT_KEYS, JSON_KEYS, IndexRows
from app.joins.resolve import resolve
from app.joins.spec import SpecError
from app.logic.fk_join import Joined, Left, Move, Right, apply_left, exact_view, newest_per_key
from app.settings import Settings
from app.state.overlay import MemoryIO, Overlay


def orders(**top: Any) -> dict[str, Any]:
    spec = {
        "kind": "foreign-key",
        "name": "orders",
        "left": {
            "topic": "o",
            "key": "order_id",
            "foreign_key": "customer.id",
            "time": "at",
            "time_format": "iso8601",
            "fields": {"order_id": "str", "customer.id": "str", "amount": "float", "at": "time"},
            "copy": ["amount"],
            "time_as": "order_time",
        },
        "right": {
            "topic": "c",
            "key": "customer_id",
            "time": "$timestamp",
            "fields": {"customer_id": "str", "region": "str"},
            "copy": ["region"],
            "time_as": "region_time",
        },
        "output": "out",
        "moves": "moves",
        "ticks": "ticks",
    }
    spec.update(top)
    return spec


def refused(raw: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as exc:
        resolve_fk(raw, 0)
    return str(exc.value)


def edited(path: str, value: Any = None, drop: bool = False) -> dict[str, Any]:
    raw = json.loads(json.dumps(orders()))
    *parents, last = path.split("/")
    at = raw
    for p in parents:
        at = at[p]
    if drop:
        del at[last]
    else:
        at[last] = value
    return raw


def test_the_car_spec_keeps_its_records_and_tables():
    spec = resolve_fk(car_spec(Settings()))
    assert spec.output_fields == (
        "car_id",
        "zone_id",
        "fuel_level",
        "pollution_level",
        "car_event_time",
        "zone_event_time",
    )
    assert spec.move_fields == ("op", "zone_id", "car_id", "to_zone_id", "fuel_level", "event_time")
    assert spec.int_keys and spec.right_inputs == ("etj-zones", "etj-car-moves", "etj-car-ticks")
    out = Joined(Left(7, 2, (0.8,), 20), Right(2, (31.5,), 12))
    assert json.dumps(spec.to_wire(out)) == (
        '{"car_id": 7, "zone_id": 2, "fuel_level": 0.8, "pollution_level": 31.5, '
        '"car_event_time": 20, "zone_event_time": 12}'
    )
    assert spec.from_wire(spec.to_wire(out)) == out
    move = Move("DEL", 1, Left(7, 2, (0.8,), 20))
    assert spec.move_to_wire(move) == {
        "op": "DEL",
        "zone_id": 1,
        "car_id": 7,
        "to_zone_id": 2,
        "fuel_level": 0.8,
        "event_time": 20,
    }
    assert spec.move_of(spec.move_to_wire(move)) == move


def test_a_users_spec_reads_nested_paths_and_names_its_move_fields_apart():
    spec = resolve_fk(orders())
    assert (spec.fk, spec.fk_as, spec.move_fk) == ("customer_id", "customer_id", "left_customer_id")
    assert not spec.int_keys and spec.tables.index == "orders-index"
    move = Move("DEL", "c1", Left("o1", "c2", (9.5,), 1000))
    assert spec.move_of(spec.move_to_wire(move)) == move
    d = spec.describe()
    assert (d["kind"], d["left"]["foreign_key"], d["right"]["key"]) == (
        "foreign-key",
        "customer_id",
        "customer_id",
    )
    assert d["left"]["paths"]["customer_id"] == "customer.id"


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            edited("left/foreign_key", "nope"),
            "left.foreign_key names 'nope', a field o records do not have",
        ),
        (
            edited("left/foreign_key", "order_id"),
            "left.foreign_key 'order_id' must be a field of its own",
        ),
        (edited("left/copy", ["amount", "customer.id"]), "left.copy lists the foreign key"),
        (edited("left/fields/customer.id", "str?"), "left field 'customer.id' is optional"),
        (edited("right/fields/region", "str?"), "right field 'region' is optional"),
        (edited("left/fields/customer.id", "float"), "left.foreign_key is of type float"),
        (edited("left/fields/customer.id", "int"), "left.foreign_key is int but right.key is str"),
        (edited("left/id", "order_id"), "left.id: a foreign-key join has no join id"),
        (edited("left/time_as", drop=True), "left.time_as: missing"),
        (edited("right/copy", []), "right.copy is empty"),
        (edited("moves", "c"), "must be five different topics"),
        (edited("right/copy", [{"region": "amount"}]), "output fields collide: amount"),
        (edited("tables", {"left": "x"}), "tables.right: missing"),
        (edited("kind", "fk"), "kind: Input should be 'foreign-key'"),
        (edited("left/foreign_key", drop=True), "left.foreign_key: missing"),
    ],
)
def test_each_mistake_names_the_spec_and_the_field(raw, message):
    text = refused(raw)
    assert text.startswith(("join spec #1 'orders': ", "join spec #1: "))
    assert message in text, text


def test_specs_of_both_kinds_are_checked_together(tmp_path):
    moods = resolve(mood_spec(Settings()))
    with pytest.raises(SpecError, match="share the name 'moods'"):
        check_together([moods], [resolve_fk(orders(name="moods"))])
    with pytest.raises(SpecError, match="writes etj-events, which join 'moods' reads"):
        check_together([moods], [resolve_fk(orders(output="etj-events"))])
    # a spec with promises writes <output>-final too: no other join may write or read it
    final = dataclasses.replace(moods, finality=True)
    assert final.final_topic == f"{moods.output}-final"
    with pytest.raises(SpecError, match=f"share the topic '{final.final_topic}'"):
        check_together([final], [resolve_fk(orders(output=final.final_topic))])
    reader = orders(left={**orders()["left"], "topic": final.final_topic})
    with pytest.raises(SpecError, match=f"writes {final.final_topic}, which join 'orders'"):
        check_together([final], [resolve_fk(reader)])
    path = tmp_path / "joins.json"
    path.write_text(
        json.dumps(
            [
                orders(),
                {
                    **mood_spec(Settings()),
                    "name": "m2",
                    "output": "m2-out",
                    "ticks": "m2-ticks",
                    "tables": None,
                },
            ]
        )
    )
    events, fks = load_all(Settings(joins_file=path, builtin_joins="cars"))
    assert [s.name for s in events] == ["m2"] and [f.name for f in fks] == ["cars", "orders"]


def test_a_foreign_key_join_may_share_an_input_with_an_event_time_join():
    """Each reader is handed every record (app.compat.consumer): the orders' right side reads
    the moods' dimension topic too; a topic has one start for all of its joins."""
    moods = resolve(mood_spec(Settings()))
    shared = orders(right={**orders()["right"], "topic": moods.dimension.topic})
    check_together([moods], [resolve_fk(shared)])
    with pytest.raises(SpecError) as exc:
        check_together([moods], [resolve_fk({**shared, "start": "latest"})])
    assert str(exc.value).startswith(
        "join specs 'moods' (dimension) and 'orders' (right) both read etj-moods but start "
        "at 'earliest' and 'latest'"
    )


def test_string_index_keys_keep_each_right_keys_rows_apart():
    """``c1``'s rows are one key range, ``c10``'s another (the length prefix), scanned alone."""
    rows = IndexRows(Overlay(MemoryIO()), JSON_KEYS)
    for fk, key in [("c1", "o2"), ("c10", "o1"), ("c1", "o1"), ("c", "o3")]:
        rows.put(0, fk, Left(key, fk, (1.0,), 5))
    assert [left.key for left in rows.pointing_at(0, "c1")] == ["o1", "o2"]
    assert [left.key for left in rows.pointing_at(0, "c10")] == ["o1"]
    assert JSON_KEYS.group_key(JSON_KEYS.encode("c1", "o2")) == JSON_KEYS.prefix("c1")
    assert JSON_KEYS.decode(JSON_KEYS.encode("c1", "o2")) == ("c1", "o2")
    assert INT_KEYS.encode(1, 7).hex() == "80000000000000018000000000000007"


def test_a_left_change_moves_the_row_and_the_consumer_ends_on_the_exact_view():
    # 1. order o1 for customer c1 at t=10, then moved to c2 at t=20: DEL c1, ADD c2
    position, moves = apply_left(None, Left("o1", "c1", (5.0,), 10))
    assert [(m.op, m.fk) for m in moves] == [("ADD", "c1")]
    position, moves = apply_left(position, Left("o1", "c2", (5.0,), 20))
    assert [(m.op, m.fk) for m in moves] == [("DEL", "c1"), ("ADD", "c2")]
    # 2. an older version arriving late moves nothing
    assert apply_left(position, Left("o1", "c1", (5.0,), 15)) == (None, [])
    # 3. outputs in any order: the consumer keeps the exact one
    lefts = [Left("o1", "c1", (5.0,), 10), Left("o1", "c2", (5.0,), 20)]
    rights = [Right("c1", ("eu",), 1), Right("c2", ("us",), 3), Right("c2", ("asia",), 2)]
    outs = [Joined(lefts[1], rights[1]), Joined(lefts[0], rights[0]), Joined(lefts[1], None)]
    assert newest_per_key(outs) == exact_view(lefts, rights) == {"o1": Joined(lefts[1], rights[1])}


def test_its_topics_are_on_the_topics_page_and_made_by_topics_create(tmp_path):
    """The inventory ``topics create`` and docs/operating/topics.md are made from."""
    from app.docgen.topics_doc import inventory

    path = tmp_path / "joins.json"
    path.write_text(json.dumps([orders(partitions=6)]))
    s = Settings(joins_file=path)
    uses = {u.topic: u for u in inventory(s, []) if u.join == "orders"}
    assert set(uses) == {
        "o",
        "c",
        "out",
        "moves",
        "ticks",
        *(f"{s.app_id}-orders-{t}-changelog" for t in ("left", "right", "index")),
    }
    assert uses["moves"].created_by == "the worker" and uses["moves"].partitions == 6
    assert uses[f"{s.app_id}-orders-index-changelog"].compacted
    assert uses["c"].timed_by_timestamp and not uses["o"].timed_by_timestamp

"""Joins that feed joins (issue AA item 3, app/joins/chains.py): a join whose events are
another join's revision log. The spec resolves with the upstream's ``revision`` read as the
order of an id's events; an older revision coming after a newer one changes nothing; a loop,
and what a downstream cannot read of the revisions, are refused naming the spec and why."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.joins.resolve import resolve_all
from app.joins.spec import SpecError
from app.logic.event_join import Event, JoinRules, KeyState, add_event, add_version

pytestmark = pytest.mark.unit


def chain(prefix: str = "c") -> list[dict[str, Any]]:
    """Orders × customer tiers (keyed by customer), whose revisions × product prices (keyed by
    product: through a repartition hop)."""
    tiers = {
        "name": "tiers",
        "events": {
            "topic": f"{prefix}-orders",
            "key": "customer",
            "time": "at",
            "id": "id",
            "fields": {"id": "str", "customer": "str", "product": "str", "at": "time"},
            "copy": ["customer", "product", "at"],
        },
        "dimension": {
            "topic": f"{prefix}-customers",
            "key": "customer",
            "time": "at",
            "fields": {"customer": "str", "tier": "str", "at": "time"},
            "copy": ["tier"],
            "time_as": "tier_time",
        },
        "output": f"{prefix}-orders-tiered",
        "ticks": f"{prefix}-tiers-ticks",
        "retention_ms": 10**12,
    }
    priced = {
        "name": "priced",
        "events": {
            "topic": f"{prefix}-orders-tiered",
            "key": "product",
            "time": "at",
            "id": "id",
            "repartition": True,
            "fields": {
                "id": "str",
                "customer": "str",
                "product": "str",
                "at": "time",
                "tier": "str?",
            },
            "copy": ["customer", "product", "at", "tier"],
        },
        "dimension": {
            "topic": f"{prefix}-products",
            "key": "product",
            "time": "at",
            "fields": {"product": "str", "price": "int", "at": "time"},
            "copy": ["price"],
            "time_as": "price_time",
        },
        "output": f"{prefix}-orders-priced",
        "ticks": f"{prefix}-priced-ticks",
        "retention_ms": 10**12,
    }
    return [tiers, priced]


def changed(raw: list[dict[str, Any]], path: str, value: Any) -> list[dict[str, Any]]:
    """``raw`` with ``priced``'s ``path`` (``events.key``) set (``...``: removed)."""
    out = copy.deepcopy(raw)
    *parents, leaf = path.split(".")
    node = out[1]
    for p in parents:
        node = node[p]
    if value is ...:
        del node[leaf]
    else:
        node[leaf] = value
    return out


def refused(raw: list[dict[str, Any]]) -> str:
    with pytest.raises(SpecError) as exc:
        resolve_all(raw)
    return str(exc.value)


def test_a_join_reads_another_join_output_with_its_revision_numbers_in_order():
    tiers, priced = resolve_all(chain())
    assert tiers.order_field is None and priced.order_field == "revision"
    assert priced.rules.ordered and not tiers.rules.ordered
    # the number is kept last in the state's payload, and is no output field
    assert priced.payload_fields[-1] == "revision"
    assert priced.output_fields == (
        "id",
        *("customer", "product", "at", "tier"),
        "price",
        "price_time",
        "revision",
        "previous_price",
        "cause",
    )
    assert priced.describe()["order"] == "revision"
    # a revision of tiers as its output carries it, read as priced's event
    wire = {
        "id": "o1",
        "customer": "c1",
        "product": "p1",
        "at": 5,
        "tier": "gold",
        "tier_time": 1,
        "revision": 2,
        "previous_tier": None,
        "cause": "late-dimension",
        "partition": 0,
        "source": {"topic": "c-orders", "partition": 0, "offset": 3},
    }
    import orjson

    rec = priced.events.parser(check_key=False)(b"p1", orjson.dumps(wire))
    e = priced.event_of(rec)
    assert (e.key, e.id, e.event_time, e.payload) == ("p1", "o1", 5, ("c1", "gold", 2))
    out = priced.to_wire(
        priced.rules.arrive([[1, 10]], e, None)[1]  # type: ignore[arg-type]
    )
    assert out["revision"] == 1 and out["price"] == 10 and out["tier"] == "gold"


def test_an_older_upstream_revision_after_a_newer_one_changes_nothing():
    rules = JoinRules("before", "left", ordered=True)
    state = KeyState()
    add_version(rules, state, "p1", [0, 10])

    def rev(n: int, tier: str | None) -> Event:  # (customer, tier, upstream revision)
        return Event("p1", "o1", 5, ("c1", tier, n))

    # 1. revision 1 of the upstream join: no tier yet
    assert [r.revision for r in add_event(rules, state, rev(1, None))[1]] == [1]
    # 2. revision 2: a tier came late upstream; the downstream revises
    changed_, out = add_event(rules, state, rev(2, "gold"))
    assert changed_ and [(r.revision, r.payload[1]) for r in out] == [(2, "gold")]
    # 3. revision 1 sent again (an upstream re-send after a crash): nothing changes
    assert add_event(rules, state, rev(1, None)) == (False, [])
    assert state.joins["o1"].payload == ["c1", "gold", 2]
    # 4. revision 3 changes nothing this join reads: its number is kept, with no revision
    changed_, out = add_event(rules, state, rev(3, "gold"))
    assert changed_ and out == [] and state.joins["o1"].payload == ["c1", "gold", 3]
    # 5. then revision 2 again is older, and changes nothing either
    assert add_event(rules, state, rev(2, "gold")) == (False, [])
    assert state.joins["o1"].revision == 2
    # without the order, the re-sent revision 1 would have taken the answer back
    plain = JoinRules("before", "left")
    again = KeyState()
    add_event(plain, again, rev(2, "gold"))
    assert [r.payload[1] for r in add_event(plain, again, rev(1, None))[1]] == [None]


def test_a_loop_of_joins_is_refused_naming_it():
    raw = chain()
    raw[0]["events"]["topic"] = raw[1]["output"]  # tiers reads priced's output: a loop
    raw[0]["events"]["fields"]["tier"] = "str?"
    message = refused(raw)
    assert "join specs 'tiers' -> 'priced' -> 'tiers' form a loop" in message, message


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("events.id", ..., "events.id must be 'id'"),
        ("events.key", "cause", "events.key 'cause' is not a field every revision"),
        (
            "events.fields",
            {"id": "str", "product": "str", "at": "time", "price": "int"},
            "has no field 'price'",
        ),
        ("events.time", "$timestamp", "its Kafka timestamp is when it was sent"),
        ("events.repartition", False, "is keyed by join id: give events.repartition"),
        ("events.format", "avro", "events.format 'avro', but join 'tiers' writes"),
        ("retention_ms", 1000, "retention_ms 1000 is shorter than that of 'tiers'"),
    ],
)
def test_what_a_downstream_cannot_read_of_the_revisions_is_refused(path, value, expected):
    raw = chain()
    if path == "events.fields":
        raw = changed(raw, "events.copy", ["product", "at"])
    if path == "events.key":
        raw = changed(raw, "events.fields.cause", "str")
    message = refused(changed(raw, path, value))
    assert expected in message and "'priced'" in message, message


def test_a_revision_log_read_as_a_dimension_is_refused():
    raw = chain()
    raw[1]["events"]["topic"] = "c-other-orders"
    raw[1]["events"]["repartition"] = False
    raw[1]["dimension"] = {
        "topic": "c-orders-tiered",
        "key": "product",
        "time": "at",
        "fields": {"product": "str", "tier": "str", "at": "time"},
        "copy": ["tier"],
        "time_as": "tier_time",
    }
    raw[1]["events"]["fields"] = {"id": "str", "customer": "str", "product": "str", "at": "time"}
    raw[1]["events"]["copy"] = ["customer", "product", "at"]
    assert "is read as a join's events, not as its dimension" in refused(raw)


def test_a_declared_revision_must_be_an_int():
    raw = changed(chain(), "events.fields.revision", "str")
    assert "events field 'revision': a revision number, declare it 'int'" in refused(raw)


def test_the_order_is_in_the_fingerprint_of_a_fed_join_only():
    from app.joins.fingerprint import fingerprint

    tiers, priced = resolve_all(chain())
    assert fingerprint(priced, 4)["events.order"] == "revision"
    assert "events.order" not in fingerprint(tiers, 4)  # every other spec's is as it was


def test_the_join_state_ends_on_the_newest_upstream_revision_whatever_their_order():
    """Through the engine's state (app.joins.state), as a worker runs it: the revisions of
    tiers' o1 in the order a re-send after a crash can give them."""
    import orjson

    from tests.unit.test_crash_gaps import Process

    _, priced = resolve_all(chain())
    proc = Process(priced)
    parse = priced.events.parser(check_key=False)
    assert proc.state.on_version(0, "p1", [0, 10], None, None, [1, 0]) == []
    made = []
    for offset, (number, tier) in enumerate(
        [(1, None), (2, "gold"), (1, None), (3, "gold"), (2, "gold"), (1, None)]
    ):
        wire = {"id": "o1", "customer": "c1", "product": "p1", "at": 5, "tier": tier}
        rec = parse(b"p1", orjson.dumps({**wire, "revision": number}))
        revs, _ = proc.state.on_event(0, priced.event_of(rec), None, None, [0, offset])
        made += [(r.revision, r.payload[1]) for r in revs if not r.again]
    assert made == [(1, None), (2, "gold")]
    _, raw = proc.state._find(0, "p1", "o1")
    assert proc.state.load(raw).payload == ["c1", "gold", 3]


def test_a_worker_loads_the_chain_from_its_joins_file(tmp_path):
    """What a worker starts with (app.joins.catalog.load_all: every kind of spec together),
    not only the event-time specs: the chain loads; an event-time join's output read by a
    foreign-key join, or a foreign-key join's output read as events, is still refused."""
    import json

    from app.joins.catalog import car_spec, load_all
    from app.settings import Settings

    path = tmp_path / "joins.json"
    path.write_text(json.dumps(chain()))
    events, _ = load_all(Settings(joins_file=path, builtin_joins=""))
    assert [s.name for s in events] == ["tiers", "priced"]
    fk = {**car_spec(Settings()), "name": "fk", "output": "c-orders-tiered"}
    fk.update(moves="fk-moves", ticks="fk-ticks", tables=None)
    path.write_text(json.dumps([chain()[1], fk]))
    with pytest.raises(SpecError, match="writes c-orders-tiered, which join 'priced' reads"):
        load_all(Settings(joins_file=path, builtin_joins=""))

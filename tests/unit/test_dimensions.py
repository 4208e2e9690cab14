"""Several dimensions per spec (issue AA item 1, app/joins/dimensions.py): ``"dimensions"``
expanded into a chain of one-dimension links, each an ordinary spec reading the one before
through an internal link topic; what cannot work yet is refused naming the spec and why."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import orjson
import pytest

from app.joins.dimensions import expand, link_topic
from app.joins.resolve import resolve_all
from app.joins.spec import SpecError

pytestmark = pytest.mark.unit


def dim(
    name: str, on: str | list[str], answer: str, mode: str = "left", prefix: str = "m"
) -> dict[str, Any]:
    keys = on if isinstance(on, list) else [on]
    return {
        "name": name,
        "on": on,
        "topic": f"{prefix}-{name}s",
        "key": on,
        "time": "at",
        "fields": {**dict.fromkeys(keys, "str"), answer: "str", "at": "time"},
        "copy": [answer],
        "time_as": f"{answer}_time",
        "mode": mode,
    }


def orders(key: str = "id", prefix: str = "m") -> dict[str, Any]:
    """Orders × customer tier × product price (inner) × currency rate, each keyed by its own
    field of the order."""
    return {
        "name": "enriched",
        "events": {
            "topic": f"{prefix}-orders",
            "key": key,
            "time": "at",
            "id": "id",
            "fields": {
                "id": "str",
                "customer": "str",
                "product": "str",
                "currency": "str",
                "amount": "int",
                "at": "time",
            },
            "copy": ["amount"],
        },
        "dimensions": [
            dim("customer", "customer", "tier", prefix=prefix),
            dim("product", "product", "price", "inner", prefix=prefix),
            dim("currency", "currency", "rate", prefix=prefix),
        ],
        "output": f"{prefix}-enriched",
        "retention_ms": 10**12,
    }


def refused(raw: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as exc:
        resolve_all([raw])
    return str(exc.value)


def test_three_dimensions_become_a_chain_of_links_through_internal_topics():
    c, p, r = resolve_all([orders()])
    assert [s.name for s in (c, p, r)] == [
        "enriched-customer",
        "enriched-product",
        "enriched-currency",
    ]
    # the first link reads the user's events, re-keyed by its 'on' (the record key is the id)
    assert c.events.topic == "m-orders" and c.events.key == "customer"
    assert c.events.repartition == "etj-enriched-customer-events-repartition"
    # each later link reads the one before by join id, re-keyed by its own 'on', in order
    assert c.output == link_topic("etj", "enriched", "customer") == "etj-enriched-customer-link"
    assert (p.events.topic, p.events.key, r.events.topic, r.events.key) == (
        c.output,
        "product",
        p.output,
        "currency",
    )
    # each link before the last keys its revisions by the next link's key, written as that
    # dimension's topic writes its keys: the next link reads the link topic with no hop
    assert not p.events.repartition and not r.events.repartition
    assert (c.output_key, p.output_key, r.output_key) == (
        (("product",), "str"),
        (("currency",), "str"),
        None,
    )
    assert c.out_key({"product": "p1", "currency": "eur"}, "o1") == b"p1"
    assert r.out_key({"product": "p1", "currency": "eur"}, "o1") == b"o1"
    assert (p.order_field, r.order_field, c.order_field) == ("revision", "revision", None)
    assert c.internal_output and p.internal_output and not r.internal_output
    assert r.output == "m-enriched"
    assert [s.mode for s in (c, p, r)] == ["left", "inner", "left"]
    assert len({s.ticks for s in (c, p, r)}) == 3
    # the output: the user's copy and every dimension's answer, with why each last changed
    assert r.output_fields == (
        "id",
        "amount",
        *("tier", "previous_tier", "tier_time"),
        *("price", "previous_price", "price_time"),
        *("customer_cause", "product_cause"),
        "rate",
        "rate_time",
        "revision",
        "previous_rate",
        "cause",
        "dimension",
    )


def test_a_link_reads_the_revision_the_link_before_it_writes():
    c, p, _ = resolve_all([orders()])
    # a revision of the first link as its output carries it
    wire = {
        "id": "o1",
        "amount": 3,
        "product": "p1",
        "currency": "eur",
        "at": 5,
        "tier": None,
        "tier_time": None,
        "revision": 2,
        "previous_tier": "gold",
        "cause": "late-dimension",
        "dimension": "customer",
        "partition": 0,
        "source": {"topic": "m-orders", "partition": 0, "offset": 3},
    }
    assert set(wire) == {*c.output_fields, "partition", "source"}
    rec = p.events.parser(check_key=False)(b"p1", orjson.dumps(wire))
    e = p.event_of(rec)
    assert (e.key, e.id, e.event_time) == ("p1", "o1", 5)
    out = p.to_wire(p.rules.arrive([[1, "9.5"]], e, None)[1])  # type: ignore[arg-type]
    assert (out["tier"], out["previous_tier"], out["customer_cause"]) == (
        None,
        "gold",
        "late-dimension",
    )
    assert (out["price"], out["revision"], out["currency"]) == ("9.5", 1, "eur")
    # the event came with the customer's change: the revision says so, once, last
    assert out["cause"] == "arrival" and out["dimension"] == "customer"
    assert list(out)[-1] == "dimension"


def test_the_output_names_the_dimension_whose_change_made_each_revision():
    """``dimension``: the link's own when its own dimension changed the answer, the upstream
    revision's when the change came through the event, none for the event itself."""
    c, p, _ = resolve_all([orders()])
    ev = c.event_of(
        c.events.parser(check_key=False)(
            b"o1",
            orjson.dumps(
                {
                    "id": "o1",
                    "amount": 3,
                    "customer": "c1",
                    "product": "p1",
                    "currency": "eur",
                    "at": 5,
                }
            ),
        )
    )
    first = c.to_wire(c.rules.arrive([], ev, None)[1])  # type: ignore[arg-type]
    assert (first["cause"], first["dimension"]) == ("arrival", None)
    rev = c.rules.arrive([], ev, None)[1]
    assert rev is not None
    late = c.to_wire(dataclasses.replace(rev, cause="late-dimension"))
    assert late["dimension"] == "customer"
    rec = p.events.parser(check_key=False)(b"p1", orjson.dumps({**late, "revision": 2}))
    down = p.rules.arrive([[1, "9.5"]], p.event_of(rec), None)[1]
    assert down is not None
    assert p.to_wire(down)["dimension"] == "customer"
    assert p.to_wire(dataclasses.replace(down, cause="late-dimension"))["dimension"] == "product"
    assert p.to_wire(dataclasses.replace(down, cause="revisit"))["dimension"] == "product"


def test_a_copied_field_named_dimension_is_refused():
    raw = orders()
    raw["events"]["copy"] = [*raw["events"]["copy"], {"amount": "dimension"}]
    assert "a copied field named 'dimension'" in refused(raw)


def test_events_keyed_by_the_first_dimension_are_read_as_they_are():
    c, _, _ = resolve_all([orders(key="customer")])
    assert c.events.repartition is None and c.events.key == "customer"


def test_a_composite_on_key_keys_its_link():
    raw = orders()
    raw["events"]["fields"]["region"] = "str"
    raw["dimensions"][1] = dim("product", ["region", "product"], "price")
    c, p, r = resolve_all([raw])
    assert p.events.key_parts == ("region", "product")
    assert "region" not in r.output_fields
    assert c.out_key({"region": "eu", "product": "p1"}, "o1") == b'["eu","p1"]'


def test_a_repartitioned_dimension_s_link_reads_through_a_hop_and_long_keys_are_written_as_longs():
    """A repartitioned dimension (its own hop writes text keys): the link before writes by
    join id, and the next link re-keys its topic through a hop, as any repartitioned side; Long
    keys are written as Kafka's Long serializer writes them."""
    raw = orders()
    raw["dimensions"][1]["repartition"] = True
    raw["dimensions"][2]["key_format"] = "long"
    raw["events"]["fields"]["currency"] = "int"
    raw["dimensions"][2]["fields"]["currency"] = "int"
    c, p, r = resolve_all([raw])
    assert c.output_key is None and p.events.repartition
    assert p.output_key == (("currency",), "long") and not r.events.repartition
    assert p.out_key({"currency": 7}, "o1") == (7).to_bytes(8, "big")


def test_a_single_dimension_list_is_one_link_writing_the_output():
    raw = orders()
    raw["dimensions"] = raw["dimensions"][:1]
    (only,) = resolve_all([raw])
    assert (only.name, only.output, only.internal_output) == (
        "enriched-customer",
        "m-enriched",
        False,
    )


def test_other_specs_resolve_beside_a_multi_dimension_one():
    from tests.unit.test_chains import chain

    specs = resolve_all([*chain(), orders()])
    assert [s.name for s in specs][:2] == ["tiers", "priced"] and len(specs) == 5


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"finality": True}, "'finality' with 'dimensions' is refused: the last link's promise"),
        ({"emit": "final"}, "'emit' with 'dimensions' is refused"),
        ({"hold_ms": 10}, "'hold_ms' with 'dimensions' is refused"),
        ({"ticks": "t"}, "'ticks' with 'dimensions' is refused"),
        ({"tables": {"dimension": "a", "joins": "b", "clock": "c"}}, "'tables'"),
        ({"dimension": {}}, "give either 'dimension' (one) or 'dimensions'"),
        ({"dimensions": []}, "dimensions: a list of one or more"),
        ({"colour": 1}, "unknown field 'colour'"),
        ({"name": "x" * 35}, "is over 40 characters"),
    ],
)
def test_what_a_multi_dimension_spec_cannot_do_is_refused_naming_it(change, says):
    raw = {**orders(), **change}
    msg = refused(raw)
    assert says in msg and msg.startswith("join spec ")


def test_refusals_of_the_events_and_the_dimensions():
    raw = orders()
    del raw["events"]["id"]
    assert "'enriched': events.id is required with 'dimensions'" in refused(raw)
    raw = orders()
    raw["events"]["model"] = "x:Y"
    del raw["events"]["fields"]
    assert "events: give 'fields' (not 'model')" in refused(raw)
    raw = orders()
    del raw["dimensions"][1]["on"]
    assert "dimension 'product': 'on' is missing" in refused(raw)
    raw = orders()
    raw["dimensions"][2]["name"] = "customer"
    assert "dimensions[2].name: a unique name" in refused(raw)
    raw = orders()
    raw["dimensions"][0]["model"] = "x:Y"
    del raw["dimensions"][0]["fields"]
    assert "dimension 'customer': give 'fields' (not 'model')" in refused(raw)
    raw = orders()
    raw["dimensions"][1]["on"] = "colour"
    assert "'colour' is not one of its fields" in refused(raw)
    # a link refused as any spec would be names the link
    raw = orders()
    raw["dimensions"][1]["copy"] = ["tier"]
    raw["dimensions"][1]["fields"]["tier"] = "str"
    assert "'enriched-product'" in refused(raw)


def test_expand_leaves_the_spec_as_written_alone():
    raw = orders()
    before = copy.deepcopy(raw)
    links = expand(raw)
    assert raw == before and len(links) == 3
    assert links[0]["events"]["copy"] == ["amount", "product", "currency", "at"]


def test_an_inner_link_s_retraction_is_read_and_passed_on_by_the_next_link():
    """An end took an inner dimension's answer: its link writes a null answer (a retraction);
    the next link must read it (every carried answer is optional), not dead-letter it."""
    _, p, r = resolve_all([orders()])
    wire = dict.fromkeys(p.output_fields)
    wire.update(
        {"id": "o1", "amount": 3, "currency": "eur", "at": 5, "revision": 3},
        cause="late-dimension",
        dimension="product",
        previous_price="9.5",
        customer_cause="arrival",
    )
    rec = r.events.parser(check_key=False)(b"eur", orjson.dumps(wire))
    rev = r.rules.arrive([[1, "1.1"]], r.event_of(rec), None)[1]
    assert rev is not None
    out = r.to_wire(rev)
    assert (out["price"], out["price_time"], out["previous_price"]) == (None, None, "9.5")
    assert (out["product_cause"], out["dimension"], out["rate"]) == (
        "late-dimension",
        "product",
        "1.1",
    )

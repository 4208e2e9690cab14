"""Messages the docs quote are the code's: made here by the code that says them."""

from __future__ import annotations

import pytest

from app.kafka.copartition import CopartitionError, check_groups
from app.settings import Settings
from tests.docs.pages import DOCS, block


def test_the_copartition_refusal_quoted_is_the_real_one():
    s = Settings.model_construct()
    quoted = block(DOCS / "concepts" / "event-time.md", "copartition-error").strip()
    with pytest.raises(CopartitionError) as exc:
        check_groups(
            {s.events_topic: 2, s.moods_topic: 4},
            [("join 'moods'", (s.events_topic, s.moods_topic, s.ticks_topic), s.partitions)],
        )
    assert str(exc.value) == quoted


# --- issue Z: keys, names, headers, json fields, versions effective later ----------------------

#: a spec of views x tiers (declarative.md's worked example, shortened); each mistake below
#: changes it, and the page quotes what the worker says, in order
VIEWS = {
    "name": "views",
    "events": {
        "topic": "etj-views",
        "key": "user",
        "time": "at",
        "id": "id",
        "fields": {"id": "str", "user": "str", "cart": "json", "at": "time"},
        "copy": ["user", "at"],
    },
    "dimension": {
        "topic": "etj-tiers",
        "key": "user",
        "time": "at",
        "fields": {"user": "str", "tier": "str", "at": "time"},
        "copy": ["tier"],
        "time_as": "tier_time",
    },
    "output": "etj-tiered-views",
    "ticks": "etj-views-ticks",
    "retention_ms": 86400000,
}


def _views(**sides: dict) -> dict:
    import copy

    spec = copy.deepcopy(VIEWS)
    for side, change in sides.items():
        spec[side].update(change)
    return spec


def _fk(**left: object) -> dict:
    return {
        "kind": "foreign-key",
        "name": "order-regions",
        "left": {
            "topic": "etj-orders",
            "key": "order_id",
            "foreign_key": "customer_id",
            "time": "at",
            "fields": {"order_id": "str", "customer_id": "str", "at": "time"},
            "copy": [],
            "time_as": "order_time",
            **left,
        },
        "right": {
            "topic": "etj-customers",
            "key": "customer_id",
            "time": "at",
            "fields": {"customer_id": "str", "region": "str", "at": "time"},
            "copy": ["region"],
            "time_as": "region_time",
        },
        "output": "etj-order-regions",
        "moves": "etj-order-regions-moves",
        "ticks": "etj-order-regions-ticks",
    }


def shapes_mistakes() -> list[dict]:
    """The mistakes the 'shapes-messages' block of declarative.md quotes, in its order."""
    int_user = {"fields": {"id": "str", "user": "int", "at": "time"}}
    return [
        _views(events={"key": ["user"]}),
        _views(
            events={"key": ["user", "at"], "fields": {"id": "str", "user": "str", "at": "float"}}
        ),
        _views(events=int_user),
        _views(events={"fields": {"id": "str", "user.": "str", "at": "time"}}),
        _views(events={"fields": {"id": "str", "user": "str", "$header.n": "int", "at": "time"}}),
        _views(dimension={"fields": {"user": "str", "tier": "json", "at": "time"}}),
        _views(events={"id": None, "copy": ["user", "cart"]}),
        _views(dimension={"max_future_ms": -1}),
        _fk(max_future_ms=604800000),
        _fk(key=["order_id", "customer_id"]),
    ]


def test_the_refusals_of_issue_z_quoted_are_the_real_ones():
    from app.joins.fk_spec import is_foreign_key, resolve_fk
    from app.joins.resolve import resolve
    from app.joins.spec import SpecError
    from app.runtime import refusal_line

    quoted = block(DOCS / "joins" / "declarative.md", "shapes-messages").strip().splitlines()
    got = []
    for raw in shapes_mistakes():
        if raw.get("events", {}).get("id", "") is None:
            del raw["events"]["id"]
        with pytest.raises(SpecError) as exc:
            (resolve_fk if is_foreign_key(raw) else resolve)(raw, 0)
        got.append(refusal_line(exc.value))
    assert got == quoted

"""Messages the docs quote are the code's: made here by the code that says them."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from app.commands.dead_letters import Summary
from app.commands.replay import Judge, Original, inputs_of
from app.joins.fingerprint import SpecChangeError, SpecGuard, fingerprint
from app.joins.resolve import resolve
from app.kafka.copartition import CopartitionError, check_groups, wrong_partition_reason
from app.kafka.partitioner import partition_for
from app.loop.dead_letters import dead_letter_value, read_dead_letter
from app.runtime import REFUSED_CODE
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


def test_the_schema_registry_refusals_quoted_are_the_real_ones():
    """declarative.md#schema-registry-formats: the example spec resolves (its repartitioned
    dimension keyed as the events are, by longs), and each mistake gives the message quoted."""
    from app.joins.resolve import refuse_without_registry, resolve, resolve_all
    from app.joins.spec import SpecError

    page = DOCS / "joins" / "declarative.md"
    raw = json.loads(block(page, "registry-spec"))
    spec = resolve(raw)
    assert (spec.events.format, spec.dimension.format, spec.output_format) == (
        "avro",
        "protobuf",
        "avro",
    )
    assert spec.dimension.input_key_format == "long"

    def broken(edit: Callable[[dict[str, Any]], Any], check: Any = None) -> str:
        bad = json.loads(json.dumps(raw))
        edit(bad)
        try:
            specs = resolve_all([bad])
            if check is not None:
                check(specs)
        except SpecError as exc:
            return f"app.joins.spec.SpecError: {exc}"
        raise AssertionError("accepted")

    def avro_keys(s: dict[str, Any]) -> None:
        s["events"]["key_format"] = "avro"

    got = [
        broken(lambda s: s["events"].update(format="xml")),
        broken(lambda s: s["events"].update(key_format="utf8")),
        broken(lambda s: s.update(output_format="parquet")),
        broken(lambda s: s["dimension"].pop("repartition")),
        broken(avro_keys),
        broken(lambda s: None, lambda specs: refuse_without_registry(specs, None)),
    ]
    assert got == block(page, "registry-messages").strip().splitlines()


RUNBOOK = DOCS / "operating" / "runbook.md"


def _worked_example() -> dict[str, Any]:
    [spec] = json.loads(block(DOCS / "joins" / "declarative.md", "joins.json"))
    return spec


def test_the_spec_refusal_quoted_is_the_one_a_worker_logs():
    """The worked example's dimension copying one more field: the line app.runtime.refuse
    logs (the refusal, then the exit code)."""
    before = _worked_example()
    after = copy.deepcopy(before)
    after["dimension"]["fields"]["level"] = "int"
    after["dimension"]["copy"] = ["tier", "level"]
    guard = SpecGuard(resolve(after), 4)
    with pytest.raises(SpecChangeError) as exc:
        guard.check(0, {"spec": fingerprint(resolve(before), 4), "late_before": None}, 1)
    logged = f"{exc.value}; exiting ({REFUSED_CODE})"
    assert logged == block(RUNBOOK, "spec-refusal").strip()


def test_the_replay_summary_quoted_is_what_a_replay_prints():
    """The worked example's page views: one produced to partition 1 where its key's is 0
    (dead-lettered twice), one malformed; the replay's summary for them."""
    spec = resolve(_worked_example())
    topic = spec.events.topic
    now = 1_796_543_431_046
    judge = Judge(inputs_of([spec]), {topic: 4}, now, Settings().max_future_ms)
    stray = json.dumps({"id": "v1", "user_id": "u1", "page": "/", "event_time": now}).encode()
    bad = json.dumps({"id": "v2", "user_id": "u2", "page": 404, "event_time": now}).encode()
    assert partition_for(b"u1", 4) == 0

    def letter(key: bytes, value: bytes, partition: int, offset: int, error: str) -> Any:
        raw = dead_letter_value(topic, partition, offset, key, value, error, now, [])
        return read_dead_letter(raw)

    wrong = wrong_partition_reason(b"u1", 1, 0, 4)
    summary = Summary("etj-dead-letters", dry_run=False, read=3, last_written=now)
    summary.verdicts = [
        judge(letter(b"u1", stray, 1, 3, wrong), Original(b"u1", stray, now, [])),
        judge(letter(b"u2", bad, 2, 4, "invalid EtjPageViewsIn: page: …"), None),
        judge(letter(b"u1", stray, 1, 3, wrong), None),
    ]
    assert "\n".join(summary.lines()) == block(RUNBOOK, "replay-summary").strip()

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

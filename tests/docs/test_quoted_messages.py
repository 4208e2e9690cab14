"""Messages the docs quote are the code's: made here by the code that says them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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

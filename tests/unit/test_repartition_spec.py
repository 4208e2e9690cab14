"""Any record key (issue 46 item 3): ``"repartition": true`` on a side re-keys its records
through ``<app id>-<join>-<side>-repartition``. The plan (topic name, partition count, what the
join reads, what is sampled, what is created, the topics page) and every refusal, naming the
spec and the field."""

from __future__ import annotations

from typing import Any

import pytest

from app.docgen.topics_doc import inventory
from app.joins.resolve import resolve, resolve_all
from app.joins.sides import repartition_topic
from app.settings import Settings
from tests.unit.test_spec_shapes import refused, spec

pytestmark = pytest.mark.unit


def repartitioned(**top: Any) -> dict[str, Any]:
    """Views keyed by a session id (or nothing), joined on user.id, re-keyed."""
    return spec(events={"repartition": True}, **top)


def test_a_repartitioned_side_reads_its_internal_topic_named_after_app_join_and_side():
    s = resolve(repartitioned(), app_id="shop")
    assert (
        s.events.repartition
        == "shop-views-events-repartition"
        == repartition_topic("shop", "views", "events")
    )
    assert s.events.topic == "views"  # the user's topic: read by the hop, archived as it is
    assert s.inputs == ("shop-views-events-repartition", "tiers", "ticks")  # co-partitioned
    assert [x.topic for x in s.repartitioned] == ["views"]
    assert s.dimension.repartition is None and s.dimension.input == "tiers"
    assert s.describe()["events"]["repartition"] == "shop-views-events-repartition"
    assert "repartition" not in s.describe()["dimension"]


def test_both_sides_may_be_repartitioned_and_default_is_off():
    s = resolve(spec(events={"repartition": True}, dimension={"repartition": True}))
    assert s.inputs == ("etj-views-events-repartition", "etj-views-dimension-repartition", "ticks")
    assert resolve(spec()).events.repartition is None


def test_the_topics_page_lists_the_repartition_topic_with_the_join_partition_count():
    settings = Settings.model_construct()
    uses = {u.topic: u for u in inventory(settings, resolve_all([repartitioned(partitions=6)]))}
    hop = uses["etj-views-events-repartition"]
    assert (hop.kind, hop.created_by, hop.partitions, hop.compacted) == (
        "internal",
        "the worker",
        6,
        False,
    )
    assert "Create" in hop.operations and "user.id" in hop.what
    # the user's topic is read by the hop: any key, any partition count
    assert uses["views"].partitions is None and "repartitioned" in uses["views"].what
    assert uses["tiers"].partitions == 6


def test_refusals_name_the_spec_and_the_field():
    assert refused(spec(events={"repartition": "yes"})) == (
        "join spec #1 'views': events.repartition: Input should be a valid boolean"
    )
    with pytest.raises(Exception) as exc:
        resolve(repartitioned(), app_id="my app")
    assert str(exc.value) == (
        "join spec 'views': events.repartition: its topic 'my app-views-events-repartition' "
        "(<app id>-<join>-<side>-repartition) is not a valid Kafka topic name (letters, "
        "digits, '.', '_', '-', at most 249): change ETJ_APP_ID"
    )


def test_a_repartitioned_topic_may_be_read_by_another_join_from_the_same_start():
    """The hop and the other join are both handed every record of views (app.compat.consumer);
    a topic has one start, for every join that reads it."""
    other = spec(
        events={"topic": "views"},
        dimension={"topic": "tiers2"},
        name="other",
        output="out2",
        ticks="ticks2",
    )
    other["tables"] = {"dimension": "o-d", "joins": "o-j", "clock": "o-c"}
    views, o = resolve_all([repartitioned(), other])
    assert (views.events.topic, views.events.input) == ("views", "etj-views-events-repartition")
    assert (o.events.topic, o.events.input) == ("views", "views")
    with pytest.raises(Exception) as exc:
        resolve_all([repartitioned(), {**other, "start": "latest"}])
    assert str(exc.value) == (
        "join specs 'views' (events) and 'other' (events) both read views but start at "
        "'earliest' and 'latest': a worker reads a topic once, for every join that reads it, "
        "from one start; give both the same start"
    )


def test_a_repartition_topic_that_is_one_of_the_spec_own_topics_is_refused():
    assert refused(repartitioned(output="etj-views-events-repartition")) == (
        "join spec #1 'views': etj-views-events-repartition, the repartition topic of views, "
        "is one of the spec's own topics"
    )


def test_the_archive_of_a_repartitioned_side_is_its_own_topic_read_whatever_the_key(
    tmp_path, monkeypatch
):
    """The batch twin keys by the field, never by the record key: ``archive`` of the side's own
    topic keeps records keyed by a session or not at all, as the hop reads them; a side without
    ``repartition`` still leaves out a record whose key disagrees."""
    import json

    from app.commands import archive as A

    path = tmp_path / "joins.json"
    path.write_text(
        json.dumps(
            [
                spec(
                    events={
                        "repartition": True,
                        "time_format": "epoch_ms",
                        "fields": {"id": "str", "user.id": "str", "page": "str", "at": "time"},
                        "copy": ["user.id", "page", "at"],
                    }
                )
            ]
        )
    )
    monkeypatch.setattr(A, "settings", Settings(joins_file=path))
    sides = A.input_models()
    click = json.dumps({"id": "c1", "user": {"id": "u1"}, "page": "/", "at": 5}).encode()
    expected = {"id": "c1", "user_id": "u1", "page": "/", "at": 5}
    assert A.archive_value(sides["views"], b"session-9", click) == expected
    assert A.archive_value(sides["views"], None, click) == expected
    assert A.archive_value(sides["views"], None, b'{"id": "c2", "page": "/", "at": 5}') is None
    tier = json.dumps({"user_id": "u1", "tier": "gold"}).encode()
    assert A.archive_value(sides["tiers"], b"session-9", tier, 1) is None  # not repartitioned
    assert A.archive_value(sides["tiers"], b"u1", tier, 1) is not None


def test_topics_create_plans_the_repartition_topic_with_the_join_count():
    from app.commands.topics import plan

    settings = Settings.model_construct()
    uses = inventory(settings, resolve_all([repartitioned(partitions=6)], settings.app_id))
    todo, lines = plan(uses, {"views": 3, "tiers": 6}, inputs=False)
    assert (
        "create   etj-views-events-repartition (internal of views, 6 partitions, "
        "cleanup.policy=delete)" in lines
    )
    assert "exists   views" in lines  # 3 partitions: any count will do for a repartitioned side
    assert [u.topic for u in todo if u.topic.endswith("-repartition")] == [
        "etj-views-events-repartition"
    ]

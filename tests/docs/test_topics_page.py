"""The topics-and-ACLs page (docs/operating/topics.md) is generated from the spec list, and the
generator's inventory is what app/topology.py declares: neither can drift."""

from __future__ import annotations

from app.docgen import topics_doc
from app.joins.catalog import load_specs


def test_the_page_is_what_the_code_gives_now():
    assert topics_doc.PAGE.read_text(encoding="utf-8") == topics_doc.page(), (
        "docs/operating/topics.md is stale: run `python -m app.docgen.topics_doc` and commit it"
    )


def test_the_inventory_is_every_topic_the_topology_declares():
    from app import topology
    from app.faust_app import app, settings

    uses = topics_doc.inventory(settings, load_specs(settings))
    by_topic = {u.topic: u for u in uses}
    assert len(by_topic) == len(uses), "a topic listed twice"

    cars = topology.cars
    channels = [
        topology.dead_letters,
        topology.late,
        cars.arrivals,
        cars.moves,
        cars.ticks,
        cars.zone_inputs,
        cars.output,
    ]
    for j in topology.joins.values():
        channels += [j.inputs, j.ticks, j.output, *filter(None, [j.final])]
    declared = {t for ch in channels for t in ch.topics}
    changelogs = {table.changelog_topic.get_topic_name() for table in app.tables.values()}
    leader = app._leader_assignor._leader_topic_name
    assert set(by_topic) == declared | changelogs | {leader}

    # what the agents read, the worker may read; what Faust declares itself, it creates
    read = {t for j in topology.joins.values() for t in j.inputs.topics}
    read |= {*cars.arrivals.topics, *cars.zone_inputs.topics}
    assert all(by_topic[t].read_by_worker for t in read)
    internal = {t for ch in channels if ch.internal for t in ch.topics}
    created = {t for t, u in by_topic.items() if u.created_by == "the worker"}
    assert created == internal | changelogs | {leader}
    assert all("Create" in by_topic[t].operations for t in created)
    assert not any("Create" in u.operations for u in uses if u.created_by == "you")
    # each join's three tables are its own: their changelogs are listed under it
    for name, j in topology.joins.items():
        for table in (j.tables.history, j.tables.joins, j.tables.clock):
            assert by_topic[table.changelog_topic.get_topic_name()].join == name


def test_an_input_several_joins_read_is_listed_under_each_naming_the_others():
    from app.settings import Settings

    tiers = topics_doc._example_spec()
    specs = topics_doc.resolve_all([tiers, topics_doc._second_join(tiers)], "etj")
    uses = topics_doc.inventory(Settings.model_construct(), specs)
    views = [(u.join, u.what) for u in uses if u.topic == tiers["events"]["topic"]]
    assert [(j, w.split(" ([")[0]) for j, w in views] == [
        ("tiers", "input: events; also read by join `clicks`"),
        ("clicks", "input: events; also read by join `tiers`"),
    ]
    acl = topics_doc.tables(Settings.model_construct(), specs)
    assert acl.count(f"--topic {tiers['events']['topic']} ") == 1  # its ACL once

"""A worker refuses to start on a bad spec or non-co-partitioned spec topics (real processes)."""

from __future__ import annotations

import json

from app.joins.catalog import movie_spec
from app.settings import Settings
from tests.harness import create_topic


async def test_a_spec_naming_an_unknown_field_stops_the_worker_with_the_reason(
    names, worker_factory, tmp_path
):
    spec = movie_spec(Settings())
    spec.update(
        name="films", ticks=f"{names.prefix}-films-ticks", output=f"{names.prefix}-films-out"
    )
    spec["events"]["copy"] = ["movie_id", "stars"]
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([spec]))
    w = worker_factory(names, joins_file=path)
    assert w.wait_exit(timeout_s=120) != 0
    assert (
        "SpecError: join spec #1 'films': events.copy names 'stars', a field etj-ratings "
        "records do not have"
    ) in w.log()


async def test_spec_topics_with_different_partition_counts_are_refused(names, worker_factory):
    await create_topic(names, names.ratings_topic, 4)
    await create_topic(names, names.movies_topic, 3)
    w = worker_factory(names)
    assert w.wait_exit(timeout_s=120) != 0
    log = w.log()
    assert "refuses to start" in log
    assert f"{names.ratings_topic} has 4" in log and f"{names.movies_topic} has 3" in log

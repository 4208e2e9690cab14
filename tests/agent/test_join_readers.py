"""Every join read the same way (app.web.join_readers): an event-time spec's key gives its
versions and each join's latest revision, a foreign-key join's key (a zone) its reading and its
cars' current joins; what the views answer at ``/joins/<join>/<key>/``, from state."""

from __future__ import annotations

import json

from app.agents import car_join as car_agents
from app.commands.sample_traffic import mood_line, revision_line
from app.settings import Settings
from app.topology import cars
from app.web.join_readers import EventTimeReader, output_topics, readers
from tests.agent.conftest import captured, deliver

T = 1_790_000_000_000
S = Settings()


def test_every_join_this_worker_runs_has_a_reader_of_its_kind():
    kinds = {name: r.kind for name, r in readers.items()}
    assert kinds == {"moods": "event-time", "movies": "event-time", "cars": "foreign-key"}
    assert output_topics() == {
        "moods": S.output_topic,
        "movies": S.rated_movies_topic,
        "cars": S.car_pollution_topic,
    }
    described = readers["movies"].describe()
    assert (described["kind"], described["key"], described["key_url"]) == (
        "event-time",
        "movie_id",
        "/joins/movies/{key}/",
    )
    assert readers["cars"].describe()["key"] == "zone_id"


async def test_an_event_time_key_reads_its_versions_and_latest_revisions(join_harness):
    async with join_harness("movies") as h:
        reader = EventTimeReader(h.engine)
        assert reader.read("m1", 0) is None  # no state: the view's 404
        # 1. a rating with no movie yet (inner): held, no revision to list
        await h.event(
            {"id": "r1", "movie_id": "m1", "user_id": "u", "rating": 3.0, "event_time": T}
        )
        assert reader.read("m1", 0)["held"] == 1
        # 2. its movie, then a correction of the title stamped before the rating
        await h.dimension({"movie_id": "m1", "title": "Alien", "event_time": T + 5})
        await h.dimension({"movie_id": "m1", "title": "Alien (1979)", "event_time": T - 5})
        got = reader.read("m1", 0)
        assert got["versions"] == [
            {"event_time": T - 5, "title": "Alien (1979)"},
            {"event_time": T + 5, "title": "Alien"},
        ]
        assert got["held"] == 0 and got["stream_time"] == T + 5
        # the latest revision is what the output's consumer rule keeps: the last one sent
        assert got["joins"] == [h.outputs()[-1]]
        assert (got["joins"][0]["title"], got["joins"][0]["revision"]) == ("Alien (1979)", 2)


async def test_a_foreign_key_key_reads_its_version_and_its_members_current_joins():
    reader = readers["cars"]
    with captured() as sent:
        for table in (cars.positions, cars.pollution, cars.zone_cars):
            table.data.clear()
        assert reader.parse_key("5") == 5
        assert reader.read(5, 0) is None
        await deliver(
            car_agents.track_loop,
            S.car_arrivals_topic,
            "1",
            {"car_id": 1, "to_zone_id": 5, "fuel_level": 0.5, "event_time": 10},
        )
        # the car's move reaches the zone side as the move topic would hand it
        [(key, move)] = [(k, v) for t, k, v in sent if t == S.car_moves_topic]
        await deliver(car_agents.zone_loop, S.car_moves_topic, key, json.loads(move))
        await deliver(
            car_agents.zone_loop,
            S.zones_topic,
            "5",
            {"zone_id": 5, "pollution_level": 42.0, "event_time": 20},
        )
        got = reader.read(5, 0)
    assert got["versions"] == [{"event_time": 20, "pollution_level": 42.0}]
    assert got["joins"] == [
        {
            "car_id": 1,
            "zone_id": 5,
            "fuel_level": 0.5,
            "pollution_level": 42.0,
            "car_event_time": 10,
            "zone_event_time": 20,
        }
    ]


def test_watch_prints_any_join_s_revision_id_first_and_the_mood_line_as_before():
    rev = {"id": "r1", "movie_id": "m1", "title": "Alien", "revision": 2, "cause": "late-dimension"}
    assert revision_line(rev) == 'r1 rev 2 [late-dimension] movie_id="m1" title="Alien"'
    assert revision_line({"car_id": 1, "pollution_level": None}) == "car_id=1 pollution_level=null"
    mood = {
        "consultant": "alice",
        "recommendation": "bike",
        "event_time": 5,
        "revision": 2,
        "cause": "late-mood",
        "previous_mood": "sad",
        "mood": "happy",
    }
    assert mood_line(mood) == " alice bike     t=5 rev 2 [late-mood] CORRECTION sad -> happy"

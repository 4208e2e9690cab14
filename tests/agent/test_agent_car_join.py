"""Car-join agents driven through their loops: fast, no broker (broker tests are elsewhere).

Both agents run; the moves the car side sends are handed to the zone side by the test, so each
scenario chooses when a DEL or ADD lands. The tables are checked as well as what was sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.agents import car_join as agent_module
from app.faust_app import settings
from app.state.ordered_keys import encode_zone_car
from app.topology import cars
from tests.agent.conftest import Sent, captured, deliver, outputs

car_positions, zone_pollution, zone_cars = cars.positions, cars.pollution, cars.zone_cars

FIELDS = {"car_id", "zone_id", "fuel_level", "pollution_level", "car_event_time", "zone_event_time"}


class Harness:
    """Puts messages on the agents' topics and records every send."""

    def __init__(self, cars: Any, zones: Any, sent: Sent) -> None:
        self.cars, self.zones, self.sent = cars, zones, sent
        self.forwarded = 0  # moves of ``sent`` already queued
        self.queue: list[tuple[bytes, dict[str, Any]]] = []  # moves in flight

    async def put(
        self, agent: Any, topic: str, key: str | bytes | None, value: Any, partition: int = 0
    ) -> None:
        await deliver(agent, topic, key, value, partition)

    async def arrive(self, car: int, zone: int, fuel: float, t: int) -> None:
        await self.put(
            self.cars,
            settings.car_arrivals_topic,
            str(car),
            {"car_id": car, "to_zone_id": zone, "fuel_level": fuel, "event_time": t},
        )

    async def reading(self, zone: int, level: float, t: int) -> None:
        await self.put(
            self.zones,
            settings.zones_topic,
            str(zone),
            {"zone_id": zone, "pollution_level": level, "event_time": t},
        )

    def moves(self) -> list[tuple[bytes, dict[str, Any]]]:
        return [(k, json.loads(v)) for t, k, v in self.sent if t == settings.car_moves_topic]

    async def deliver(self, only_zone: int | None = None) -> None:
        """Hand pending moves to the zone side (those of one zone, or all), in their order."""
        sent = self.moves()
        self.queue += sent[self.forwarded :]
        self.forwarded = len(sent)
        now = [m for m in self.queue if only_zone is None or m[1]["zone_id"] == only_zone]
        self.queue = [m for m in self.queue if m not in now]
        for key, move in now:
            await self.put(self.zones, settings.car_moves_topic, key, move)

    def outputs(self, topic: str | None = None) -> list[Any]:
        return outputs(self.sent, topic or settings.car_pollution_topic)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    with captured() as sent:
        for table in (car_positions, zone_pollution, zone_cars):
            table.data.clear()
        yield Harness(agent_module.track_loop, agent_module.zone_loop, sent)


async def test_a_move_sends_del_and_add_keyed_by_zone_and_stores_the_position(harness):
    await harness.arrive(7, 1, 0.9, 10)
    await harness.arrive(7, 2, 0.8, 20)
    assert [(k, m["op"], m["zone_id"], m["event_time"]) for k, m in harness.moves()] == [
        (b"1", "ADD", 1, 10),
        (b"1", "DEL", 1, 20),
        (b"2", "ADD", 2, 20),
    ]
    assert car_positions[7] == [20, 2, 0.8, 1]  # newest arrival, and the zone it left
    await harness.arrive(7, 1, 0.5, 15)  # older, arriving late: no move at all
    assert len(harness.moves()) == 3 and car_positions[7][1] == 2


async def test_zone_update_reaches_every_car_of_the_zone_and_no_other(harness):
    # 1. cars 1, 2 in zone 5, car 3 in zone 6; zone 5 has no reading yet: null pollution
    for car, zone in ((1, 5), (2, 5), (3, 6)):
        await harness.arrive(car, zone, 0.5, 100 + car)
    await harness.deliver()
    out = harness.outputs()
    assert all(set(o) == FIELDS for o in out)
    assert [(o["car_id"], o["pollution_level"], o["zone_event_time"]) for o in out] == [
        (1, None, None),
        (2, None, None),
        (3, None, None),
    ]
    assert sorted(zone_cars.data.keys()) == [
        encode_zone_car(5, 1),
        encode_zone_car(5, 2),
        encode_zone_car(6, 3),
    ]
    # 2. a reading of zone 5: one output per car of zone 5, found by range scan
    await harness.reading(5, 42.0, 90)
    assert harness.outputs()[3:] == [
        {
            "car_id": 1,
            "zone_id": 5,
            "fuel_level": 0.5,
            "pollution_level": 42.0,
            "car_event_time": 101,
            "zone_event_time": 90,
        },
        {
            "car_id": 2,
            "zone_id": 5,
            "fuel_level": 0.5,
            "pollution_level": 42.0,
            "car_event_time": 102,
            "zone_event_time": 90,
        },
    ]
    assert zone_pollution[5] == [90, 42.0]
    # 3. an older reading changes nothing; a car arriving later picks up the stored one
    await harness.reading(5, 1.0, 80)
    await harness.arrive(4, 5, 0.3, 200)
    await harness.deliver()
    assert [(o["car_id"], o["pollution_level"]) for o in harness.outputs()[5:]] == [(4, 42.0)]


async def test_del_add_race_leaves_a_stale_output_that_the_consumer_rule_discards(harness):
    await harness.reading(1, 10.0, 1)
    await harness.reading(2, 20.0, 1)
    await harness.arrive(9, 1, 0.7, 10)
    await harness.deliver()
    await harness.arrive(9, 2, 0.6, 20)
    await harness.deliver(only_zone=2)  # the ADD lands first
    await harness.reading(1, 11.0, 30)  # zone 1 still lists car 9: a stale output
    await harness.deliver()  # now the DEL
    await harness.reading(1, 12.0, 40)  # car 9 is gone from zone 1
    out = [(o["zone_id"], o["pollution_level"], o["car_event_time"]) for o in harness.outputs()]
    assert out == [(1, 10.0, 10), (2, 20.0, 20), (1, 11.0, 10)]
    newest = max(harness.outputs(), key=lambda o: o["car_event_time"])
    assert (newest["zone_id"], newest["pollution_level"]) == (2, 20.0)
    assert list(zone_cars.data.keys()) == [encode_zone_car(2, 9)]


async def test_bad_records_become_dead_letters_and_the_agents_go_on(harness):
    await harness.put(harness.cars, settings.car_arrivals_topic, "1", b"{oops")
    await harness.put(
        harness.cars,
        settings.car_arrivals_topic,
        "2",
        {"car_id": 1, "to_zone_id": 1, "fuel_level": 0.5, "event_time": 1},
    )
    await harness.put(
        harness.cars,
        settings.car_arrivals_topic,
        "1",
        b'{"car_id": 1, "to_zone_id": 1, "fuel_level": NaN, "event_time": 1}',
    )
    await harness.put(
        harness.zones,
        settings.zones_topic,
        "3",
        {"zone_id": 3, "pollution_level": "high", "event_time": 1},
    )
    await harness.put(
        harness.zones,
        settings.car_moves_topic,
        "3",
        {
            "op": "MOVE",
            "zone_id": 3,
            "car_id": 1,
            "to_zone_id": 3,
            "fuel_level": 0.5,
            "event_time": 1,
        },
    )
    await harness.put(harness.zones, settings.zones_topic, "3", None)
    dead = harness.outputs(settings.dead_letter_topic)
    assert [d["topic"] for d in dead] == [settings.car_arrivals_topic] * 3 + [
        settings.zones_topic,
        settings.car_moves_topic,
        settings.zones_topic,
    ]
    reasons = " | ".join(d["error"] for d in dead)
    for phrase in (
        "not valid JSON",
        "disagrees",
        "finite",
        "valid number",
        "op",
        "deletes nothing",
    ):
        assert phrase in reasons
    await harness.arrive(1, 3, 0.5, 5)  # good records after the bad ones are joined
    await harness.deliver()
    assert [o["car_id"] for o in harness.outputs()] == [1]


async def test_records_of_any_age_are_joined_never_sent_to_late(harness):
    now = 100 * settings.retention_ms
    await harness.reading(1, 5.0, now)
    await harness.arrive(1, 1, 0.5, now)
    await harness.deliver()
    # a zone whose only reading is far behind every retention horizon is still that zone's
    # newest reading; so is a car's first arrival
    await harness.reading(2, 7.0, 1)
    await harness.arrive(2, 2, 0.4, 2)
    await harness.deliver()
    assert harness.outputs(settings.late_topic) == []
    assert harness.outputs()[-1] == {
        "car_id": 2,
        "zone_id": 2,
        "fuel_level": 0.4,
        "pollution_level": 7.0,
        "car_event_time": 2,
        "zone_event_time": 1,
    }


def car_rows(sent: Sent) -> dict[tuple[str, bytes], bytes | None]:
    """The car join's changelog rows sent so far: (topic, key) -> value (None: a tombstone)."""
    return {(t, k): v for t, _, k, v in sent.changelog}


async def test_redelivered_records_write_their_rows_again(harness):
    """After a kill -9 a worker that kept its RocksDB holds rows whose changelog rows were lost
    with the process; their records come again (uncommitted), find their rows equal and, unless
    they write them again, the next owner of the partition (recovering from the changelog)
    never has them: a car missing from its zone, a zone without its reading, a car left in the
    zone it moved out of (the DEL's tombstone lost). The event joins do the same
    (tests/agent/test_gap_free.py)."""
    h = harness
    await h.reading(zone=1, level=7.0, t=100)
    await h.arrive(car=9, zone=1, fuel=0.5, t=200)
    await h.deliver()
    await h.arrive(car=9, zone=2, fuel=0.4, t=300)  # DEL zone 1, ADD zone 2
    await h.deliver()
    first = car_rows(h.sent)
    tombstones = [k for (t, k), v in first.items() if v is None]
    assert len(tombstones) == 1 and len(first) == 4  # position, reading, (1, 9) gone, (2, 9)
    moves = h.moves()
    h.sent.changelog.clear()  # lost with the process; the local stores still have the rows
    await h.reading(zone=1, level=7.0, t=100)
    await h.arrive(car=9, zone=2, fuel=0.4, t=300)
    for key, move in moves:  # every move comes again, the first ADD (zone 1) too
        await h.put(h.zones, settings.car_moves_topic, key, move)
    assert car_rows(h.sent) == first, "every row the records wrote is written again, unchanged"

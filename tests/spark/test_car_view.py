"""The batch car view gives the stream's answer: a scenario, then a property over random data.

The property drives the stream's pure car-join rules (both sides, moves through per-partition
queues, as tests/unit/test_car_join_logic.py does) to get an output log, and checks that the batch
view equals the stream's exact view and that the batch consumer rule picks the same output.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from app.batch.car_view import CAR_COLUMNS, car_view, compare_car_views, latest_car_outputs
from app.logic.car_join import CarArrival, ZoneReading, exact_car_view, newest_per_car
from tests.unit.test_car_join_logic import Cluster

ARRIVAL_DDL = "car_id bigint, to_zone_id bigint, fuel_level double, event_time bigint"
ZONE_DDL = "zone_id bigint, pollution_level double, event_time bigint"
OUT_DDL = ("car_id bigint, zone_id bigint, fuel_level double, pollution_level double, "
           "car_event_time bigint, zone_event_time bigint")


def test_latest_arrival_ties_and_zones_without_readings(spark):
    # 1. car 1: zone 2 at t=10, then zone 3 at t=5 arriving later (older: ignored)
    #    car 2: zones 4 and 5 both at t=7 (tie: the greater zone id, 5)
    #    car 3: zone 6 at t=8, fuel 0.2 and 0.9 (tie: the greater fuel level)
    #    car 4: zone 9, which never reports a pollution level
    arrivals = spark.createDataFrame([
        (1, 2, 0.5, 10), (1, 3, 0.4, 5), (2, 4, 0.1, 7), (2, 5, 0.3, 7),
        (3, 6, 0.2, 8), (3, 6, 0.9, 8), (4, 9, 1.0, 1),
    ], ARRIVAL_DDL)
    # 2. zone 2's latest level is 30 (t=12: after the car arrived — the view is "now");
    #    zone 5 has 7.0 and 8.0 at t=3 (tie: 8.0); zone 6 one reading; zone 3 is not used
    zones = spark.createDataFrame([
        (2, 20.0, 1), (2, 30.0, 12), (5, 7.0, 3), (5, 8.0, 3), (6, 1.5, 2), (3, 99.0, 1),
    ], ZONE_DDL)
    expected = spark.createDataFrame([
        (1, 2, 0.5, 30.0, 10, 12), (2, 5, 0.3, 8.0, 7, 3), (3, 6, 0.9, 1.5, 8, 2),
        (4, 9, 1.0, None, 1, None),
    ], OUT_DDL)
    assertDataFrameEqual(car_view(arrivals, zones), expected)


def test_comparison_finds_a_stale_output(spark):
    exact = spark.createDataFrame([(1, 2, 0.5, 30.0, 10, 12), (2, 5, 0.3, None, 7, None)],
                                  OUT_DDL)
    log = spark.createDataFrame([
        (1, 2, 0.5, 20.0, 10, 1, 0), (1, 2, 0.5, 30.0, 10, 12, 1),   # car 1 ends right
        (2, 5, 0.3, None, 7, None, 2), (2, 4, 0.1, None, 6, None, 3),  # an older move, later
        (8, 1, 0.0, None, 1, None, 4),                                 # no such car: extra
    ], OUT_DDL + ", _pos bigint")
    latest = latest_car_outputs(log)
    assert {r["car_id"]: (r["zone_id"], r["outputs"]) for r in latest.collect()} == {
        1: (2, 2), 2: (5, 2), 8: (1, 1)}
    statuses = dict(compare_car_views(exact, latest).select("car_id", "status").collect())
    assert statuses == {1: "matched", 2: "matched", 8: "extra"}


arrivals = st.builds(CarArrival, car_id=st.integers(0, 5), to_zone_id=st.integers(0, 4),
                     fuel_level=st.sampled_from([0.1, 0.5, 0.9]), event_time=st.integers(0, 12))
readings = st.builds(ZoneReading, zone_id=st.integers(0, 4),
                     pollution_level=st.sampled_from([1.0, 2.0, 3.0]),
                     event_time=st.integers(0, 12))


def stream_outputs(records: list[CarArrival | ZoneReading], seed: int) -> Cluster:
    """The stream's rules in one random interleaving of inputs and move deliveries."""
    rnd = random.Random(seed)
    order = records[:]
    rnd.shuffle(order)
    c = Cluster(partitions=2)
    while order or c.busy():
        if order and (not c.busy() or rnd.random() < 0.5):
            rec = order.pop()
            c.arrive(rec) if isinstance(rec, CarArrival) else c.read(rec)
        else:
            c.deliver(rnd.choice(c.busy()))
    return c


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(arrivals, min_size=1, max_size=15), st.lists(readings, max_size=15),
       st.integers(0, 2**16))
def test_batch_view_and_consumer_rule_equal_the_stream(spark, cars, zones, seed):
    expected = exact_car_view(cars, zones)
    outputs = stream_outputs([*cars, *zones], seed).outputs
    assert newest_per_car(outputs) == expected  # the stream converged (its own property)

    view = car_view(
        spark.createDataFrame([(a.car_id, a.to_zone_id, a.fuel_level, a.event_time)
                               for a in cars], ARRIVAL_DDL),
        spark.createDataFrame([(z.zone_id, z.pollution_level, z.event_time) for z in zones],
                              ZONE_DDL))
    rows = [tuple(o.to_wire()[c] for c in CAR_COLUMNS) for o in expected.values()]
    assertDataFrameEqual(view, spark.createDataFrame(rows, OUT_DDL))

    log = spark.createDataFrame([(*(o.to_wire()[c] for c in CAR_COLUMNS), i)
                                 for i, o in enumerate(outputs)], OUT_DDL + ", _pos bigint")
    assertDataFrameEqual(latest_car_outputs(log).drop("outputs"),
                         spark.createDataFrame(rows, OUT_DDL))

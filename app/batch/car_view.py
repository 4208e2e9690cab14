"""The car/zone view over bounded data: pure DataFrame -> DataFrame transforms (no I/O).

Same rules as the stream (docs/batch/index.md; :mod:`app.logic.car_join`):

- a car is in the ``to_zone_id`` of its latest arrival by event time (an older arrival that comes
  later does not move it back); ties on event time: the greatest (to_zone_id, fuel_level);
- a car's output carries its zone's latest pollution by event time (ties: the greatest level),
  or null when the zone never reported one.

No as-of join here (so no method to choose, unlike :mod:`app.batch.mood_joins`): the view is
"now", the latest of each side, so it is two ``max`` aggregations (by car, by zone) and one
equi-join of their results, which are one row per car and per zone.

A stream consumer keeps, per car, the greatest output by
:func:`app.logic.car_join.output_order`: the arrival order (car_event_time first),
then the reading order, an output without a reading below any with one; equal: the later record.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["CAR_COLUMNS", "car_view", "latest_car_outputs", "compare_car_views"]

#: one output record (the wire contract of ``etj-car-pollution``), wire order
CAR_COLUMNS = ["car_id", "zone_id", "fuel_level", "pollution_level", "car_event_time",
               "zone_event_time"]


def car_view(arrivals: DataFrame, zones: DataFrame) -> DataFrame:
    """The exact view: one row per car that ever arrived. Columns: :data:`CAR_COLUMNS`."""
    cars = (arrivals.groupBy("car_id")
            .agg(F.max(F.struct("event_time", "to_zone_id", "fuel_level")).alias("a"))
            .select("car_id", F.col("a.to_zone_id").alias("zone_id"),
                    F.col("a.fuel_level").alias("fuel_level"),
                    F.col("a.event_time").alias("car_event_time")))
    # (car_id, zone_id, fuel_level, car_event_time)
    levels = (zones.groupBy("zone_id")
              .agg(F.max(F.struct("event_time", "pollution_level")).alias("z"))
              .select("zone_id", F.col("z.pollution_level").alias("pollution_level"),
                      F.col("z.event_time").alias("zone_event_time")))
    # (zone_id, pollution_level, zone_event_time)
    return cars.join(levels, "zone_id", "left").select(*CAR_COLUMNS)


def latest_car_outputs(outputs: DataFrame, order: str | None = "_pos") -> DataFrame:
    """Per car, the output a consumer ends on (:func:`app.logic.car_join.output_order`, then
    the later record). Columns: :data:`CAR_COLUMNS` + ``outputs`` (records of the car)."""
    pos = F.col(order) if order else F.lit(0)
    no_reading = F.col("zone_event_time").isNull() | F.col("pollution_level").isNull()
    rank = F.struct(
        "car_event_time", "zone_id", "fuel_level",
        F.when(no_reading, F.lit(-1)).otherwise(F.col("zone_event_time")).alias("zt"),
        F.when(no_reading, F.lit(float("-inf"))).otherwise(F.col("pollution_level")).alias("pl"),
        pos.alias("_o"))
    best = (outputs.groupBy("car_id")
            .agg(F.max_by(F.struct(*CAR_COLUMNS[1:]), rank).alias("o"),
                 F.count(F.lit(1)).alias("outputs")))
    return best.select("car_id", *[F.col(f"o.{c}").alias(c) for c in CAR_COLUMNS[1:]],
                       "outputs")


def _same(a: str, b: str) -> Column:
    cond = F.lit(True)
    for c in CAR_COLUMNS[1:]:
        cond = cond & F.col(f"{a}.{c}").eqNullSafe(F.col(f"{b}.{c}"))
    return cond


def compare_car_views(exact: DataFrame, latest: DataFrame) -> DataFrame:
    """Full outer comparison by car id: ``status`` in matched / wrong / missing / extra.

    Columns: car_id, status, ``expected`` and ``actual`` (structs of :data:`CAR_COLUMNS`).
    """
    e = exact.select("car_id", F.struct(*CAR_COLUMNS).alias("expected"))
    a = latest.select("car_id", F.struct(*CAR_COLUMNS, "outputs").alias("actual"))
    status = (F.when(F.col("actual").isNull(), "missing")
              .when(F.col("expected").isNull(), "extra")
              .when(_same("expected", "actual"), "matched")
              .otherwise("wrong"))
    return (e.join(a, "car_id", "full_outer")
            .select("car_id", status.alias("status"), "expected", "actual"))

"""The car/zone view over bounded data: pure DataFrame -> DataFrame transforms (no I/O).

Same rules as the stream (docs/batch/index.md; :mod:`app.logic.car_join`):

- a car is in the ``to_zone_id`` of its latest arrival by event time (an older arrival that comes
  later does not move it back); ties on event time: the greatest (to_zone_id, fuel_level);
- a car's output carries its zone's latest pollution by event time (ties: the greatest level),
  or null when the zone never reported one.

The car join is a foreign-key spec: these are :mod:`app.batch.fk_view`'s transforms over its
spec, under the names they had (``python -m app.batch exact --join cars --left ... --right ...``
runs the same code).

A stream consumer keeps, per car, the greatest output by
:func:`app.logic.car_join.output_order`: the arrival order (car_event_time first),
then the reading order, an output without a reading below any with one; equal: the later record.
"""

from __future__ import annotations

from functools import lru_cache

from pyspark.sql import DataFrame

from app.batch.fk_view import compare_fk_views, fk_view, latest_fk_outputs
from app.joins.fk_spec import FkJoinSpec

__all__ = ["CAR_COLUMNS", "car_view", "latest_car_outputs", "compare_car_views"]

#: one output record (the wire contract of ``etj-car-pollution``), wire order
CAR_COLUMNS = [
    "car_id",
    "zone_id",
    "fuel_level",
    "pollution_level",
    "car_event_time",
    "zone_event_time",
]


@lru_cache(maxsize=1)
def car_spec() -> FkJoinSpec:
    """The car join's spec (its names; the topics do not matter here)."""
    from app.joins.catalog import car_spec as raw
    from app.joins.fk_spec import resolve_fk
    from app.settings import Settings

    return resolve_fk(raw(Settings()))


def car_view(arrivals: DataFrame, zones: DataFrame) -> DataFrame:
    """The exact view: one row per car that ever arrived. Columns: :data:`CAR_COLUMNS`."""
    return fk_view(car_spec(), arrivals, zones)


def latest_car_outputs(outputs: DataFrame, order: str | None = "_pos") -> DataFrame:
    """Per car, the output a consumer ends on (:func:`app.logic.car_join.output_order`, then
    the later record). Columns: :data:`CAR_COLUMNS` + ``outputs`` (records of the car)."""
    return latest_fk_outputs(car_spec(), outputs, order)


def compare_car_views(exact: DataFrame, latest: DataFrame) -> DataFrame:
    """Full outer comparison by car id: ``status`` in matched / wrong / missing / extra.

    Columns: car_id, status, ``expected`` and ``actual`` (structs of :data:`CAR_COLUMNS`).
    """
    return compare_fk_views(car_spec(), exact, latest)

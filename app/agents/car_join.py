"""Agents: car positions x zone pollution, a one-to-many join (docs/joins/car-zone.md).

The car join is a foreign-key spec (``cars`` in :mod:`app.joins.catalog`): its agents are those
of every foreign-key join (:mod:`app.agents.fk_join`), run over its spec, which keeps the topics,
outputs, table names and changelog bytes it had before it was one.

etj-car-arrivals (key car id) -> ``track_cars`` -> table car-positions -> car moves
    (internal, key zone id: DEL old zone, ADD new zone)
etj-zones + car moves + car ticks (key zone id, co-partitioned) -> ``join_zone_pollution`` -> tables
    zone-pollution, zone-cars ((zone_id, car_id) keys) -> etj-car-pollution (key car id)

This module names them in the car join's words (tests drive ``track_loop`` and ``zone_loop``).
"""

from __future__ import annotations

from app import topology
from app.agents.fk_join import engines

#: the car join's topics and tables (app.main imports this module only when the worker runs it)
CARS = topology.cars
if CARS is None:
    raise ImportError(
        f"{__name__} imported on a worker that does not run the car join (ETJ_BUILTIN_JOINS)"
    )

_cars = engines["cars"]
car_side, zone_side = _cars.left_side, _cars.right_side
track_loop, zone_loop = _cars.left_loop, _cars.right_loop
track_cars, join_zone_pollution = _cars.left_agent, _cars.right_agent
track_cars.__doc__ = "Keep each car's newest position; send DEL/ADD to the zones it leaves/enters."

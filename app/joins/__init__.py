"""Declarative joins: a new pair of topics to join is a spec, not a new agent.

- :mod:`app.joins.spec` — what a spec says, and its validation (``SpecError``);
- :mod:`app.joins.catalog` — the built-in specs (moods, movies) and ``ETJ_JOINS_FILE``;
- :mod:`app.joins.state` — where a join's state lives: a row per join and per dimension version,
  and its indexes;
- :mod:`app.joins.keys` — the byte keys of those rows;
- :mod:`app.joins.rekey` — the join key of a record keyed otherwise (a repartitioned side's hop);
- :mod:`app.joins.car_state` — the car join's tables, keys and rows (that join is no spec: two
  agents, one-to-many; its state layout sits beside the specs' all the same).

Every spec's topics and tables are declared by :mod:`app.topology`, its agent is
:mod:`app.agents.event_join`, its rules are pure, in :mod:`app.logic.event_join` (the car
join's: :mod:`app.agents.car_join`, :mod:`app.logic.car_join`). This package imports neither
topology nor agents (no cycle).
"""

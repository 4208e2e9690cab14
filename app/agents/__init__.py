"""The agents: the rules of each join as an engine over its tables, one Faust agent per input
group, each run by the durable loop (:mod:`app.loop`).

- :mod:`app.agents.event_join` — every join spec (moods, movies, a user's): one agent per spec
  reads its events, dimension and ticks topics (declared by :mod:`app.topology`), joins by event
  time with the rules of :mod:`app.logic.event_join`, over the tables of :mod:`app.joins.state`;
- :mod:`app.agents.repartition` — a spec side with ``"repartition": true``: its topic (any
  record key) re-keyed by the join key into an internal topic the join's agent reads instead;
- :mod:`app.agents.fk_join` — every foreign-key spec (the car join, a user's): the left side
  (left records -> moves keyed by right key), then the right side (right records and moves ->
  output), with the rules of :mod:`app.logic.fk_join` over the tables of
  :mod:`app.joins.fk_state`;
- :mod:`app.agents.car_join` — the car join's two agents in its own words (``track_cars``,
  ``join_zone_pollution``).

Their outputs leave through :mod:`app.outputs`.
"""

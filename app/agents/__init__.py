"""The agents: the rules of each join as an engine over its tables, one Faust agent per input
group, each run by the durable loop (:mod:`app.loop`).

- :mod:`app.agents.event_join` — every join spec (moods, movies, a user's): one agent per spec
  reads its events, dimension and ticks topics (declared by :mod:`app.topology`), joins by event
  time with the rules of :mod:`app.logic.event_join`, over the tables of :mod:`app.joins.state`;
- :mod:`app.agents.repartition` — a spec side with ``"repartition": true``: its topic (any
  record key) re-keyed by the join key into an internal topic the join's agent reads instead;
- :mod:`app.agents.car_join` — the one-to-many car join: the car side (arrivals -> car moves),
  then the zone side (zones and car moves -> car pollution), with the rules of
  :mod:`app.logic.car_join` over the tables of :mod:`app.joins.car_state`.

Their outputs leave through :mod:`app.outputs`.
"""

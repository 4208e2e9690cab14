"""Declarative joins: a new pair of topics to join is a spec, not a new agent.

- :mod:`app.joins.spec` — what a spec says, and its validation (``SpecError``);
- :mod:`app.joins.sides` — a spec's side resolved: its fields, paths, event time and wire model;
- :mod:`app.joins.resolve` — a spec resolved, then every spec together;
- :mod:`app.joins.chains` — a join whose events are another join's output (joins that feed
  joins): the order of an id's revisions, what such a spec may read, loops refused;
- :mod:`app.joins.catalog` — the built-in specs (moods, movies) and ``ETJ_JOINS_FILE``;
- :mod:`app.joins.state` — where a join's state lives: a row per join and per dimension version,
  and its indexes; the rules applied over them per batch;
- :mod:`app.joins.join_rows` — the rows a join's state reads and writes through a batch's overlays;
- :mod:`app.joins.joins_table` — the joins table, whose indexes are rebuilt from its changelog on
  recovery;
- :mod:`app.joins.keys` — the byte keys of those rows;
- :mod:`app.joins.rekey` — the join key of a record keyed otherwise (a repartitioned side's hop);
- :mod:`app.joins.fingerprint` — the keys of a spec that shape its state, kept with each
  partition's clock: a worker refuses a change that cannot read the state there;
- :mod:`app.joins.fk_spec` — foreign-key specs (``"kind": "foreign-key"``): a left table joined
  with a right table on a field of the left row; the built-in car join is one;
- :mod:`app.joins.fk_state` — where a foreign-key join's state lives: the newest version per key
  of each side, and the left rows under each right key (range scans);
- :mod:`app.joins.car_state` — the car join's tables, keys and rows in its own words (the bytes
  of :mod:`app.joins.fk_state`).

Every spec's topics and tables are declared by :mod:`app.topology`, its agent is
:mod:`app.agents.event_join`, its rules are pure, in :mod:`app.logic.event_join` (a foreign-key
spec's: :mod:`app.agents.fk_join`, :mod:`app.logic.fk_join`). This package imports neither
topology nor agents (no cycle).
"""

"""Declarative joins: a new pair of topics to join is a spec, not a new agent.

- :mod:`app.joins.spec` — what a spec says, and its validation (``SpecError``);
- :mod:`app.joins.catalog` — the built-in specs (moods, movies) and ``ETJ_JOINS_FILE``;
- :mod:`app.joins.state` — where a join's state lives: a row per join, and its indexes;
- :mod:`app.joins.keys` — the byte keys of those rows.

Every spec's topics and tables are declared by :mod:`app.topology`, its agent is
:mod:`app.agents.event_join`, its rules are pure, in :mod:`app.logic.event_join`. This package
imports neither (no cycle).
"""

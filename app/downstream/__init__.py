"""Downstream consumers of etj's output topics: examples of how to read a revision log right.

Where a record ends: after the worker (:mod:`app.outputs`) wrote its revisions, a consumer
outside the worker reads them.

- :mod:`app.downstream.mood_counts` — counts of moods over the mood join's revisions, each
  revision replacing the one before it (``python -m app.downstream.mood_counts``);
- :mod:`app.downstream.postgres_sink` — a join's answers in a PostgreSQL table, by the
  consumer rule, offsets committed after each transaction (``faust -A app.main sink postgres``).

The worker never imports this package (the ``sink`` command does, when it runs).
"""

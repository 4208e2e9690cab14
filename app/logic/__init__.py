"""Pure join logic: no Faust, no Kafka, no clock. Shared by the stream agents, the batch twin and tests.

Time is always passed in as integer epoch milliseconds so that tests drive it.

In the order a record meets the rules:

- :mod:`app.logic.future_records` — records from the future: refused at the door (the stream,
  :mod:`app.inputs.admission`) and by the batch twin alike;
- :mod:`app.logic.event_range` — an event-time range of a join (``--from``/``--to``: the batch
  twin, ``archive``) and which records answering it needs;
- :mod:`app.logic.histories` — one key's dimension versions: their order, the as-of rules over
  them, the purge;
- :mod:`app.logic.event_join` — the as-of join of any join spec: join id, revisions;
- :mod:`app.logic.fk_join` — the foreign-key join of any spec: newest version per key, moves,
  re-joins, the consumer rule;
- :mod:`app.logic.car_join` — the one-to-many car join (car positions x zone pollution) in its
  own words over :mod:`app.logic.fk_join`.

Nothing here imports Faust or the rest of app (tests/unit/test_import_direction.py).
"""

"""The tools of the app: ``faust -A app.main <command>``, with the worker's settings.

- :mod:`app.commands.sample_traffic` — ``sample-traffic`` (out-of-order inputs of the joins),
  ``watch`` (the mood revisions) and ``watch-cars`` (the car view);
- :mod:`app.commands.archive` — ``archive``: a topic, start to end, as JSON lines or Parquet (the
  batch twin's input, :mod:`app.batch`);
- :mod:`app.commands.join_latest` — ``join-latest NAME``: a join's answer so far;
- :mod:`app.commands.snapshots` — ``snapshots``: the table snapshots in a store;
- :mod:`app.commands.topics` — ``topics create``: every topic a worker needs that is missing
  (inputs with ``--inputs``; ``--dry-run``: the plan).

Registered when :mod:`app.main` imports them.
"""

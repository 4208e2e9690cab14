"""The tools of the app: ``faust -A app.main <command>``, with the worker's settings.

- :mod:`app.commands.sample_traffic` — ``sample-traffic`` (out-of-order inputs of the joins),
  ``watch`` (the mood revisions; any join's with ``--join``) and ``watch-cars`` (the car view);
- :mod:`app.commands.archive` — ``archive``: a topic, start to end, as JSON lines or Parquet (the
  batch twin's input, :mod:`app.batch`; a dimension's tombstones as its ends), written by
  :mod:`app.commands.archive_sinks`;
- :mod:`app.commands.join_latest` — ``join-latest NAME``: a join's answer so far;
- :mod:`app.commands.snapshots` — ``snapshots``: the table snapshots in a store;
- :mod:`app.commands.topics` — ``topics create``: every topic a worker needs that is missing
  (inputs with ``--inputs``; ``--dry-run``: the plan, with no broker too);
- :mod:`app.commands.joins` — ``joins validate [FILE]``: a joins file checked offline, one line
  per spec or the one line a worker's start would be refused with;
- :mod:`app.commands.dead_letters` — ``dead-letters replay``: the dead letters whose cause is
  gone sent back to their input topic, judged again by the worker's rules
  (:mod:`app.commands.replay`);
- :mod:`app.commands.sink` — ``sink postgres --join NAME --dsn DSN``: a join's answers landed
  in a PostgreSQL table by the consumer rule (:mod:`app.downstream.postgres_sink`).

Registered when :mod:`app.main` imports them.
"""

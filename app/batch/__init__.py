"""The batch twin of the stream joins, on PySpark (docs/batch/index.md).

Reads top to bottom in data order:

- :mod:`app.batch.archives` — extract/load: topic archives (JSON lines, Parquet) in, tables out;
- :mod:`app.batch.admission` — which archived records a run joins: records from the future
  refused (:mod:`app.logic.future_records`), an event-time range (:mod:`app.logic.event_range`);
- :mod:`app.batch.spec_joins` (any join spec; :mod:`app.batch.mood_joins` is the ``moods``
  one), :mod:`app.batch.fk_view` (any foreign-key spec; :mod:`app.batch.car_view` is the
  ``cars`` one) — pure DataFrame transforms, the same join rules as the stream
  (:mod:`app.logic`);
- :mod:`app.batch.jobs` — ``exact``, ``reconcile``, ``backfill``
  (:mod:`app.batch.fk_jobs`: those of a foreign-key spec); :mod:`app.batch.report` — what
  ``reconcile`` says;
- :mod:`app.batch.publish` — backfill revisions onto the output topic;
- :mod:`app.batch.bootstrap` — ``bootstrap``: a catalogue as the workers' first state, each
  partition's files written on an executor by :mod:`app.batch.state_files` (no Spark, no Faust);
- :mod:`app.batch.session` — the Spark session and the progress of long jobs;
  :mod:`app.batch.cli` — ``python -m app.batch`` (also under spark-submit): its options in
  :mod:`app.batch.arguments`, each subcommand's body in :mod:`app.batch.subcommands`.

Needs the ``batch`` extra (``pip install -e '.[batch]'``); the worker image does not.
"""

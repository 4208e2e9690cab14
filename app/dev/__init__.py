"""A developer's machine: etj running locally with nothing installed but the venv.

- :mod:`app.dev.local_broker` — a Kafka-protocol broker (tansu) on 127.0.0.1, or the one
  ``ETJ_BOOTSTRAP`` names; the test session and the benchmarks start theirs with it
  (``python -m app.dev.local_broker`` starts one and prints its URL);
- :mod:`app.dev.run_local` — ``make run``: that broker, a worker (web on 6066), sample traffic
  and a live view of the revisions, as child processes of one Python process.

The worker image never runs these (the broker binary comes with the ``test`` extra).
"""

"""What a handled batch produces, on its way to the broker.

In the order a batch's records meet them:

- :mod:`app.outputs.sinks` — the side outputs' values: a dead letter (an input that cannot be
  joined, with its reason), a late record (too old for the join);
- :mod:`app.outputs.producer_batches` — a batch's changelog rows, then its outputs, appended to
  aiokafka's batch builders a partition at a time (not ``app/batch/``, the Spark twin);
- :mod:`app.outputs.delivery` — what a failed send does: the worker fails stop
  (:func:`app.runtime.fail_stop`), unless the broker refused an output for good, which is
  handed back so the loop dead-letters its input.

The loop that hands batches over and acknowledges their inputs is :mod:`app.loop.pipeline`.
"""

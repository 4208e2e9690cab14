"""What a handled batch produces, on its way to the broker.

In the order a batch's records meet them:

- :mod:`app.outputs.sinks` — the late records' values (an input too old for the join); a dead
  letter is a loop's output (:mod:`app.loop.dead_letters`);
- :mod:`app.outputs.producer_batches` — a batch's changelog rows, then its outputs, appended to
  aiokafka's batch builders a partition at a time (not ``app/batch/``, the Spark twin);
- :mod:`app.outputs.delivery` — what a failed send does: the worker fails stop
  (:func:`app.runtime.fail_stop`), unless the broker refused an output for good, which is
  handed back so the loop dead-letters its input (:mod:`app.loop.dead_letters`);
- :mod:`app.outputs.revision_formats` — a revision log written as Schema Registry framed Avro
  or JSON-SR (``output_format``): its schema from the spec, its bytes.

The loop that hands batches over and acknowledges their inputs is :mod:`app.loop.pipeline`.
"""

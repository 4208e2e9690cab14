"""An input record's way in, from the fetch to the moment its agent's rules may see it.

In the order a record meets them:

- :mod:`app.inputs.inbox` — the fetch loop (:mod:`app.compat.consumer`) puts each input
  partition's fetched records into the inbox of every agent that reads the topic, as one batch
  (a full inbox pauses its partition, for every agent that reads it);
- :mod:`app.inputs.records` — the wire records and their validation: raw bytes parsed
  (msgspec, :mod:`app.inputs.parsers`) and judged (pydantic); a record that fails becomes a
  dead letter with its reason; event times written otherwise: :mod:`app.inputs.time_formats`;
  fields named otherwise (bracketed names, Kafka headers): :mod:`app.inputs.paths`;
  values framed by a Schema Registry (Avro, Protobuf, JSON-SR) and binary keys, decoded into
  what a JSON record would be first: :mod:`app.inputs.wire_formats`; a tombstone (a null
  value) read from its key and Kafka timestamp, a delete where it means one:
  :mod:`app.inputs.tombstones`;
- :mod:`app.inputs.admission` — the door after parsing: a key in the partition Kafka's default
  partitioner gives it, no record from the future;
- :mod:`app.inputs.flow_control` — a partition's inputs released in event-time order, a batch
  at a time.

The loop that drives them is :mod:`app.loop.intake`. No Faust import in ``records``,
``parsers``, ``time_formats``, ``paths``, ``wire_formats`` and ``tombstones``: the batch twin and the tools
parse with them too.
"""

"""Kafka itself, before any record is read: how a client reaches and authenticates to the
brokers, where Kafka puts a key, and whether the joined topics can be joined at all.

In the order a worker needs them:

- :mod:`app.kafka.connection` — the bootstrap servers of ``ETJ_BROKER_URL`` (aiokafka's form);
- :mod:`app.kafka.security` — TLS and SASL from the ``ETJ_KAFKA_*`` settings: the keyword
  arguments of every aiokafka client (Faust's credentials are made from them);
- :mod:`app.kafka.partitioner` — Kafka's default partitioner (murmur2): where a key goes;
- :mod:`app.kafka.copartition` — checked at start: joined topics co-partitioned, and a sample of
  each input where the default partitioner puts its keys;
- :mod:`app.kafka.schema_registry` — the Schema Registry: writer schemas fetched by id before a
  batch is parsed, output schemas registered, a registry that does not answer waited for.

No Faust import in this package: the batch twin's executors run the partitioner and connect
with the same settings (tests/unit/test_import_direction.py holds that).
"""

"""How long the worker's consumer lets the broker hold a fetch (``ETJ_CONSUMER_FETCH_MAX_WAIT_MS``).

Faust hard-codes ``fetch_max_wait_ms=1500`` for its worker consumer. Kafka answers a fetch as
soon as one record is there, so that is only an idle-poll period; the bundled tansu broker holds
every fetch that finds nothing for the full wait, even when a record arrives meanwhile (measured:
a record produced while a fetch waited reached the consumer ~600 ms later with 1500 ms, ~3 ms
with 5 ms). On tansu that wait is the floor of every correction's latency, so the local set-up
lowers it to 100 ms; unset keeps Faust's value. Not lower: with 20–50 ms the extra requests made
tansu leave a produce request unanswered in about one run in three (a 10 s stall, then the
batch expired, before app.compat.delivery; measured with bench.correction_latency), with 100 ms none in
nine runs. (Those stalls may have been aiokafka dropping a topic's leaders from its metadata,
fixed in app.compat.delivery, rather than tansu.)

Upstream: ``faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._create_worker_consumer``
passes no ``fetch_max_wait_ms`` setting through. Test: bench.correction_latency (the latency
floor moves with the setting). Remove when Faust exposes the setting (``consumer_fetch_max_wait``
or similar) and ``app.faust_app`` passes it.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

_original = AIOKafkaConsumerThread._create_worker_consumer


def install(wait_ms: int | None) -> None:
    """Make Faust's worker consumers use ``wait_ms`` (None: Faust's own 1500 ms)."""

    def create_worker_consumer(self: AIOKafkaConsumerThread, transport: Any) -> Any:
        consumer = _original(self, transport)
        if wait_ms is not None:
            consumer._fetch_max_wait_ms = wait_ms  # read by the fetcher created in start()
        return consumer

    if wait_ms is not None:
        AIOKafkaConsumerThread._create_worker_consumer = create_worker_consumer  # type: ignore

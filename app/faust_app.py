"""The Faust app, alone in its module: everything else imports it (no import cycles)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import faust
from faust.types.auth import CredentialsT

from app.kafka.connection import bootstrap_servers
from app.kafka.copartition import check_copartitioning, warn_of_partitioners
from app.kafka.security import aiokafka_auth, check_tls
from app.kafka.timestamps import warn_of_log_append_time
from app.settings import Settings, get_settings
from app.state import crash_marker


class EtjApp(faust.App):
    """A Faust app that hands its agents a fetch at a time, checks co-partitioning before it
    consumes anything, and waits only for the batches in flight on a rebalance or a stop."""

    etj: Settings
    #: (name, topics, partition count) of the topic groups that must be co-partitioned
    #: (declared by app.topology, checked at start: app.kafka.copartition)
    copartitioned: list[tuple[str, tuple[str, ...], int]]
    #: input topics others produce to (declared by app.topology): their partitioner is
    #: sampled at start (app.kafka.copartition.warn_of_partitioners)
    produced_by_others: list[str]
    #: the internal topics (declared by app.topology), created at start if missing
    internal_topics: list
    #: every agent loop (app.loop.durable.DurableLoop): each registers itself once; the app
    #: asks them to let go of what waits, waits for what they have in flight, describes them
    loops: list
    #: what agents need done before the first record (the output schemas they register with
    #: the Schema Registry, app.agents.event_join): awaited at start, a refusal stops it
    start_steps: list
    #: the table snapshots' service (app.state.snapshot_service.install): etj's table manager
    #: restores a newly assigned partition through it first; None: snapshots are off
    table_snapshots: Any = None

    def _new_transport(self) -> Any:
        """Faust's aiokafka transport with etj's consumer (:mod:`app.compat.consumer`: input
        partitions handed to the agents' loops in batches, committed by offset range) and
        producer (:mod:`app.compat.producer`)."""
        from app.compat.consumer import EtjTransport

        return EtjTransport(self.conf.broker_consumer, self)

    def create_event(self, key: Any, value: Any, headers: Any, message: Any) -> Any:
        """Faust's, with the event class looked up once instead of per record: Faust reads
        ``self.conf.Event`` through its settings registry (a ``__getattribute__`` and a
        descriptor) for every record it hands on (changelog records, in recovery). That lookup
        was ~7 % of the main thread of a 1M-key replay (py-spy, ``bench.profile_worker
        --recovery``); the class is a setting fixed when the app is configured."""
        cls = self._event_class
        if cls is None:
            cls = self._event_class = self.conf.Event
        return cls(self, key, value, headers, message)

    _event_class: Any = None

    async def _consumer_wait_empty(self, consumer: Any, logger: Any) -> None:
        """Faust's wait before partitions are given up (a rebalance) or the worker stops: every
        record it delivered to an agent must be acked. Here what the loops have not handled
        (their inboxes, flow control) is let go — not acked, so read again from the committed
        offsets — and only the batches in flight are awaited: on a rebalance until they are
        delivered (each ends, or the worker fails stop: ``app.outputs.delivery``), on a stop at
        most ``ETJ_STOP_DRAIN_S`` (what is not delivered by then stays uncommitted, as after
        a crash). Then what is acked is committed."""
        began = time.monotonic()
        stopping = self.should_stop
        for loop in self.loops:
            loop.drop_waiting()
        budget = self.etj.stop_drain_s if stopping else None
        late = []
        for loop in self.loops:
            left = None if budget is None else max(0.0, budget - (time.monotonic() - began))
            if not await _wait_logged(loop, left, logger, self):
                late.append(loop.join)
        await consumer.commit_and_end_transactions()  # flushes the producer, then commits
        took = time.monotonic() - began
        if late:
            logger.warning(
                "stop: batches of %s not delivered within %.1f s are left unacked; "
                "the next owner of their partitions reads them again (everything "
                "delivered before is committed)",
                ", ".join(late),
                took,
            )
        elif stopping:
            logger.info("stop: every batch in flight delivered and committed in %.1f s", took)

    def describe_loops(self) -> str:
        """What each agent loop is doing (logged when a partition stalls or a wait is long)."""
        return "\n".join(loop.describe() for loop in self.loops)

    async def on_first_start(self) -> None:
        s = self.etj
        s.datadir.mkdir(parents=True, exist_ok=True)
        if s.local_tables:  # before Faust opens any table partition
            crash_marker.claim(Path(self.conf.tabledir))
        await super().on_first_start()
        await check_tls(s, bootstrap_servers(s.broker_url))  # a refused certificate, said plainly
        await check_copartitioning(s.broker_url, self.copartitioned, aiokafka_auth(s))
        if s.check_partitioner:
            await warn_of_partitioners(s.broker_url, self.produced_by_others, aiokafka_auth(s))
        await warn_of_log_append_time(
            s.broker_url, getattr(self, "timestamp_topics", ()), aiokafka_auth(s)
        )  # $timestamp inputs: CreateTime
        for topic in self.internal_topics:  # with its join's count, not the broker's default
            await topic.maybe_declare()
        for step in self.start_steps:  # e.g. an Avro output's schema registered
            await step()

    async def on_shutdown(self) -> None:
        """After every service stopped (agents, producer, consumer, tables)."""
        await super().on_shutdown()
        if self.etj.local_tables:
            crash_marker.release(
                Path(self.conf.tabledir), clean=all(loop.settled() for loop in self.loops)
            )


async def _wait_logged(loop: Any, timeout: float | None, logger: Any, app: EtjApp) -> bool:
    """``loop.pipeline.wait_delivered``, saying every 10 s what it waits for."""
    began = time.monotonic()
    while True:
        step = 10.0 if timeout is None else min(10.0, timeout - (time.monotonic() - began))
        if await loop.pipeline.wait_delivered(max(0.0, step)):
            return True
        if timeout is not None and time.monotonic() - began >= timeout:
            return False
        logger.warning(
            "rebalance: waited %.0f s for the batches in flight of %s:\n%s",
            time.monotonic() - began,
            loop.join,
            app.describe_loops(),
        )


def broker_credentials(s: Settings) -> CredentialsT | None:
    """Faust's ``broker_credentials`` for these settings (None: plaintext, no SASL): made from
    :func:`app.kafka.security.aiokafka_auth`, the mapping every other client of etj takes."""
    auth = aiokafka_auth(s)
    if "sasl_mechanism" in auth:
        return faust.SASLCredentials(
            username=auth["sasl_plain_username"],
            password=auth["sasl_plain_password"],
            mechanism=auth["sasl_mechanism"],
            ssl_context=auth["ssl_context"],
        )
    if auth.get("ssl_context") is not None:
        return faust.SSLCredentials(auth["ssl_context"])
    return None


def create_app(settings: Settings) -> EtjApp:
    """Build the app from settings (tests build their own with other settings)."""
    extra: dict[str, Any] = {}
    if settings.producer_max_batch_size is not None:
        extra["producer_max_batch_size"] = settings.producer_max_batch_size
    if settings.group_instance_id is not None:  # static membership (docs/operating/scaling.md)
        extra["consumer_group_instance_id"] = settings.group_instance_id
    if settings.producer_max_request_bytes is not None:
        extra["producer_max_request_size"] = settings.producer_max_request_bytes
    credentials = broker_credentials(settings)  # TLS / SASL (app.kafka.security)
    if credentials is not None:
        extra["broker_credentials"] = credentials
    app = EtjApp(
        settings.app_id,
        broker=settings.broker_url,
        store=settings.store_url,
        datadir=str(settings.datadir),
        web_port=settings.web_port,
        web_bind=settings.web_bind,
        web_host=settings.web_host,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=settings.heartbeat_interval_s,
        broker_rebalance_timeout=settings.rebalance_timeout_s,
        broker_commit_interval=settings.commit_interval_s,
        producer_linger=settings.producer_linger_ms / 1000,
        # Faust's extension points for etj's subclasses (app.compat): its table manager (and
        # recovery), its topic class (a failed send fails stop)
        TableManager="app.compat.table_manager:EtjTableManager",
        Topic="app.compat.producer:EtjTopic",
        Table="app.compat.stores:EtjTable",
        **extra,
    )
    app.etj = settings
    app.loops = []
    app.start_steps = []
    app.copartitioned = []
    app.produced_by_others = []
    app.internal_topics = []
    return app


settings = get_settings()
app = create_app(settings)

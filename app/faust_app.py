"""The Faust app, alone in its module: everything else imports it (no import cycles)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faust

from app import local_state
from app.copartition import bootstrap_servers, check_copartitioning
from app.kafka_security import aiokafka_auth, broker_credentials, check_tls
from app.settings import Settings, get_settings
from app.web_auth import web_application_options


class EtjApp(faust.App):
    """A Faust app that checks co-partitioning before it consumes anything."""

    etj: Settings
    #: topic groups that must have the same partition count (declared by app.topology)
    copartitioned: list[tuple[str, ...]]
    #: called when a rebalance starts, before Faust waits for every delivered record to be acked
    #: (records that flow control holds back must be let go, or that wait never ends;
    #: app.compat.revoke)
    on_revoke_drop: list
    #: called when the worker stops (SIGTERM), with on_revoke_drop's, before the bounded wait
    #: for acks: whatever an agent holds unacked and will not finish soon (app.compat.graceful_stop)
    on_stop_drop: list
    #: awaited with on_revoke_drop's, on a rebalance and on a stop: each agent hands the batch it
    #: has handled so far to its delivery (Faust clears the agents' buffers first, so the "no
    #: more records waiting" that would end the batch never comes; app.agents.durable)
    on_revoke_flush: list
    #: each agent loop's state and where its tasks wait, as text: logged when an input partition
    #: stalls or a rebalance waits long (app.compat.stall_guard, app.compat.revoke; app.awaiting)
    on_describe: list
    #: each agent loop says whether everything it handled was delivered (no changelog row
    #: pending, no batch in flight): only then is the local state left for the next start
    #: (app.local_state)
    on_settled: list

    def create_event(self, key: Any, value: Any, headers: Any, message: Any) -> Any:
        """Faust's, with the event class looked up once instead of per record: Faust reads
        ``self.conf.Event`` through its settings registry (a ``__getattribute__`` and a
        descriptor) for every record it hands on, input and changelog alike. That lookup was
        ~7 % of the main thread of a 1M-key replay (py-spy, ``bench.profile_worker
        --recovery``); the class is a setting fixed when the app is configured."""
        cls = self._event_class
        if cls is None:
            cls = self._event_class = self.conf.Event
        return cls(self, key, value, headers, message)

    _event_class: Any = None

    async def on_first_start(self) -> None:
        s = self.etj
        s.datadir.mkdir(parents=True, exist_ok=True)
        if s.local_tables:  # before Faust opens any table partition
            local_state.claim(Path(self.conf.tabledir))
        await super().on_first_start()
        await check_tls(s, bootstrap_servers(s.broker_url))  # a refused certificate, said plainly
        await check_copartitioning(s.broker_url, self.copartitioned, s.partitions,
                                   aiokafka_auth(s))

    async def on_shutdown(self) -> None:
        """After every service stopped (agents, producer, consumer, tables)."""
        await super().on_shutdown()
        if self.etj.local_tables:
            local_state.release(Path(self.conf.tabledir),
                                clean=all(settled() for settled in self.on_settled))


def create_app(settings: Settings) -> EtjApp:
    """Build the app from settings (tests build their own with other settings)."""
    extra = {}
    if settings.producer_max_batch_size is not None:
        extra["producer_max_batch_size"] = settings.producer_max_batch_size
    if settings.producer_max_request_bytes is not None:
        extra["producer_max_request_size"] = settings.producer_max_request_bytes
    credentials = broker_credentials(settings)  # TLS / SASL (app.kafka_security)
    if credentials is not None:
        extra["broker_credentials"] = credentials
    web_options = web_application_options(settings)  # the views' bearer token (app.web_auth)
    if web_options:
        extra["web_application_options"] = web_options
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
        **extra,
    )
    app.etj = settings
    app.on_revoke_drop = []
    app.on_stop_drop = []
    app.on_revoke_flush = []
    app.on_describe = []
    app.on_settled = []
    app.copartitioned = []
    return app


settings = get_settings()
app = create_app(settings)

"""``faust -A app.main sink postgres --join NAME --dsn DSN``: land a join's revision log in a
PostgreSQL table, applying the consumer rule (:mod:`app.downstream.postgres_sink`;
docs/operating/postgres-sink.md).

A sink process is a member of a consumer group (``--group``, default ``etj-sink-<table>``):
run two and they share the output's partitions; kill one and the other takes them over.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import click
from faust.cli import argument, option

from app.faust_app import app, settings
from app.kafka.connection import bootstrap_servers
from app.kafka.security import aiokafka_auth
from app.topology import joins


@app.command(
    argument("target", type=click.Choice(["postgres"])),
    option(
        "--join",
        "join_name",
        type=str,
        required=True,
        help="The join whose output to land (an event-time join: a revision log).",
    ),
    option(
        "--dsn",
        type=str,
        default="",
        help="libpq connection string or URL (empty: libpq's PG* variables).",
    ),
    option(
        "--table",
        type=str,
        default="",
        help="The table (default etj_<join>); created when missing.",
    ),
    option("--group", type=str, default="", help="Consumer group (default etj-sink-<table>)."),
    option(
        "--max-records", type=int, default=2000, help="Most records per poll: one transaction each."
    ),
)
async def sink(
    self: object, target: str, join_name: str, dsn: str, table: str, group: str, max_records: int
) -> None:
    """Upsert each join id's highest revision into a table; offsets after each commit."""
    # here, not at the top: a worker (which imports every command) never loads the sink
    from app.downstream.postgres_sink import PostgresSink, table_name_for

    if join_name not in joins:
        raise SystemExit(
            f"no event-time join {join_name!r} (a revision log); this "
            f"configuration runs: {', '.join(joins) or 'none'}"
        )
    handler = logging.StreamHandler(sys.stdout)  # the CLI's own logging shows warnings only
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    sink_log = logging.getLogger(PostgresSink.__module__)
    sink_log.addHandler(handler)
    sink_log.setLevel(logging.INFO)
    sink_log.propagate = False
    table = table or table_name_for(join_name)
    runner = PostgresSink(
        bootstrap_servers(settings.broker_url),
        joins[join_name].spec.output,
        dsn,
        table,
        group or f"etj-sink-{table}",
        auth=aiokafka_auth(settings),
        max_records=max_records,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # the batch in hand is finished, then stop
        loop.add_signal_handler(sig, runner.stop.set)
    counts = await runner.run()
    print(f"sink stopped: {counts}", flush=True)

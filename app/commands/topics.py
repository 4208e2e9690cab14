"""``faust -A app.main topics create``: create every topic a worker needs that is missing.

Why: a new deployment otherwise meets its topics one failure at a time (an output the broker
will not auto-create, a changelog auto-created with the broker's partition count and no
compaction). The list is :func:`app.docgen.topics_doc.inventory`, the one home of "what topics
a join needs" (the same list docs/operating/topics.md and ``--print`` show): outputs, the side
topics (dead letters, late records), the internal ones (ticks, changelogs, car moves, Faust's
leader topic), each with its join's partition count and a changelog compacted; inputs only
with ``--inputs`` (they are usually someone else's). ``--dry-run`` prints the plan and changes
nothing, and works with no broker too (then every topic the specs name is in the plan, as
if none existed; with one, what exists is said and what it would create counted). Topics that
exist are left as they are, and listed with their partition count when it
differs (co-partitioning then refuses the worker's start, and says why).

A ``$timestamp`` input (its event time is the Kafka timestamp) that exists is checked for
its ``message.timestamp.type`` (:mod:`app.kafka.timestamps`): anything but CreateTime is named
in a ``warning`` line.
"""

from __future__ import annotations

import asyncio

import click
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from faust.cli import argument, option

from app.docgen.topics_doc import TopicUse, inventory
from app.faust_app import app, settings
from app.joins.catalog import load_specs
from app.kafka.connection import bootstrap_servers
from app.kafka.security import aiokafka_auth
from app.kafka.timestamps import reason, timestamp_types

#: how long ``topics create`` waits for the broker to answer before it says there is none
CONNECT_TIMEOUT_S = 15.0


def plan(
    uses: list[TopicUse],
    existing: dict[str, int],
    inputs: bool,
) -> tuple[list[TopicUse], list[str]]:
    """(the topics to create, one line per topic saying what happens to it)."""
    todo: list[TopicUse] = []
    lines: list[str] = []
    seen: set[str] = set()
    for u in uses:
        if u.topic in seen:
            continue
        seen.add(u.topic)
        policy = "compact" if u.compacted else "delete"
        if u.topic in existing:
            have = existing[u.topic]
            note = (
                ""
                if u.partitions in (None, have)
                else f" (has {have} partitions, {u.join} needs {u.partitions})"
            )
            lines.append(f"exists   {u.topic}{note}")
        elif u.kind == "input" and not inputs:
            lines.append(f"missing  {u.topic} ({u.kind} of {u.join}: created with --inputs)")
        else:
            todo.append(u)
            lines.append(
                f"create   {u.topic} ({u.kind} of {u.join}, "
                f"{u.partitions or 'ETJ_PARTITIONS'} partitions, "
                f"cleanup.policy={policy})"
            )
    return todo, lines


@app.command(
    argument("action", type=click.Choice(["create"])),
    option("--inputs", is_flag=True, default=False, help="Create the missing input topics too."),
    option("--dry-run", is_flag=True, default=False, help="Print the plan, change nothing."),
)
async def topics(self: object, action: str, inputs: bool, dry_run: bool) -> None:
    """Create every topic this worker needs that is missing (ACTION: create)."""
    uses = inventory(settings, load_specs(settings))
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers(settings.broker_url), **aiokafka_auth(settings)
    )
    try:
        await asyncio.wait_for(admin.start(), CONNECT_TIMEOUT_S)
    except (KafkaError, OSError, TimeoutError) as exc:
        await admin.close()
        where = f"no broker at {settings.broker_url} ({type(exc).__name__}: {exc})"
        if not dry_run:
            raise SystemExit(f"topics create: {where}: nothing created") from None
        print(f"{where}: the plan from the specs alone", flush=True)
        todo, lines = plan(uses, {}, inputs)
        for line in lines:
            print(("would " if line.startswith("create") else "") + line, flush=True)
        print(f"would create {len(todo)} topic{'s' if len(todo) != 1 else ''}", flush=True)
        return
    try:
        names = await admin.list_topics()
        described = await admin.describe_topics(list(names)) if names else []
        existing = {d["topic"]: len(d["partitions"]) for d in described if not d.get("error_code")}
        todo, lines = plan(uses, existing, inputs)
        for line in lines:
            print(("would " if dry_run and line.startswith("create") else "") + line, flush=True)
        stamped = sorted({u.topic for u in uses if u.timed_by_timestamp and u.topic in existing})
        for topic, kind in (await timestamp_types(admin, stamped)).items():
            if kind != "CreateTime":
                print(f"warning  {reason(topic, kind)}", flush=True)
        if dry_run:
            print(f"would create {len(todo)} topic{'s' if len(todo) != 1 else ''}", flush=True)
            return
        if not todo:
            return
        await admin.create_topics(
            [
                NewTopic(
                    u.topic,
                    u.partitions or settings.partitions,
                    settings.replication_factor,
                    topic_configs={"cleanup.policy": "compact" if u.compacted else "delete"},
                )
                for u in todo
            ]
        )
        print(f"created {len(todo)} topic{'s' if len(todo) != 1 else ''}", flush=True)
    finally:
        await admin.close()

"""A sink of a join's revision log into a PostgreSQL table, applying the consumer rule.

The output of an event-time join is at-least-once and corrects itself (docs/concepts/
revision-log.md): per join id, the highest ``revision`` is the answer, and a repeat or an older
revision may arrive after a newer one (a redelivery after a crash, a rebalance). A naive upsert
would let revision 1 overwrite revision 2. This sink keeps the rule in the database itself::

    INSERT ... ON CONFLICT (id) DO UPDATE SET ... WHERE t.revision < excluded.revision

so a row only ever moves forward, whoever writes it and in whatever order, and the table
equals the exact answer (the highest revision per id) whatever the log repeats.

The steps, per poll of the consumer group (one batch):

1. the batch's records are parsed; one row per join id (its highest revision in the batch);
   a record that is not a revision (not JSON, no ``id`` or ``revision``) is a row of the
   ``<table>_rejected`` table with the reason, in the same transaction — counted and logged,
   never dropped, never fatal;
2. one transaction: the upserts (by id, in id order: two sinks during a rebalance take row
   locks in the same order, so they cannot deadlock each other) and the rejects; COMMIT;
3. only then the batch's offsets are committed to the group.

A crash between 2 and 3 redelivers the batch, which the rule makes harmless; a crash before 2
commits nothing. A rebalance may hand a partition to another sink while this one still writes
it: the same rule makes the two writers' order irrelevant. A Kafka tombstone (null value) in
the output deletes its id's row (etj itself writes none; a compacting pipeline may).

Why one ``jsonb`` column for the revision rather than a column per field: every spec's output
has its own fields, and they change with the spec (``copy``); the table then needs no migration,
and a view or generated column gives typed columns where wanted (docs/operating/postgres-sink.md).

The rule is pure (:func:`plan_batch`); :class:`PostgresSink` is the consumer and the
transaction around it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BatchPlan",
    "PostgresSink",
    "Rejected",
    "SinkCounts",
    "Upsert",
    "create_sql",
    "plan_batch",
    "table_name_for",
]

log = logging.getLogger(__name__)

#: the totals are logged at most this often (and when the sink stops)
LOG_EVERY_S = 10.0
#: a table name this sink creates: a plain SQL identifier (quoted anyway)
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Upsert:
    """One join id's highest revision in a batch, and the record it came from."""

    id: str
    revision: int
    record: dict[str, Any]
    partition: int
    offset: int


@dataclass(frozen=True)
class Rejected:
    """A record that is not a revision: kept with the reason, never dropped."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str


@dataclass
class BatchPlan:
    """What one transaction writes: upserts by id, tombstoned ids, rejects."""

    upserts: list[Upsert] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)


def _revision_of(partition: int, offset: int, key: bytes | None, value: bytes) -> Upsert | Rejected:
    try:
        record = json.loads(value)
    except ValueError as exc:
        return Rejected(partition, offset, key, value, f"not JSON: {exc}")
    if not isinstance(record, dict):
        return Rejected(partition, offset, key, value, "not a JSON object")
    jid, number = record.get("id"), record.get("revision")
    if jid is None or isinstance(jid, (dict, list)):
        return Rejected(partition, offset, key, value, "no join id (field 'id')")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        return Rejected(
            partition, offset, key, value, "no revision number (field 'revision': an integer >= 1)"
        )
    return Upsert(str(jid), number, record, partition, offset)


def plan_batch(records: Iterable[tuple[int, int, bytes | None, bytes | None]]) -> BatchPlan:
    """(partition, offset, key, value) of one batch, in log order -> what to write: per id its
    highest revision (the rule, inside the batch), or its deletion when a tombstone came after
    every revision of it in the batch; upserts sorted by id (module doc: lock order)."""
    best: dict[str, Upsert] = {}
    deleted: dict[str, int] = {}  # id -> position of its last tombstone
    plan = BatchPlan()
    for i, (partition, offset, key, value) in enumerate(records):
        if value is None:
            if key is None:
                plan.rejected.append(
                    Rejected(partition, offset, key, value, "a tombstone without a key")
                )
            else:
                jid = key.decode("utf-8", "replace")
                deleted[jid] = i
                best.pop(jid, None)
            continue
        found = _revision_of(partition, offset, key, value)
        if isinstance(found, Rejected):
            plan.rejected.append(found)
            continue
        cur = best.get(found.id)
        if cur is None or found.revision > cur.revision:
            best[found.id] = found
        deleted.pop(found.id, None)  # a revision after the tombstone: the row comes back
    plan.upserts = sorted(best.values(), key=lambda u: u.id)
    plan.deletes = sorted(deleted)
    return plan


def table_name_for(join: str) -> str:
    """The default table of a join: ``etj_<join>``, non-identifier characters as ``_``."""
    return "etj_" + re.sub(r"[^A-Za-z0-9_]", "_", join)[:58]


def create_sql(table: str) -> list[str]:
    """The statements that create the sink's tables (idempotent: run at every start)."""
    if not NAME.match(table) or not NAME.match(table + "_rejected"):
        raise ValueError(f"table name {table!r}: letters, digits and _ only, at most 63")
    return [
        f'CREATE TABLE IF NOT EXISTS "{table}" (\n'
        "    id text PRIMARY KEY,\n"
        "    revision bigint NOT NULL,\n"
        "    record jsonb NOT NULL,\n"
        "    kafka_partition integer NOT NULL,\n"
        "    kafka_offset bigint NOT NULL,\n"
        "    updated_at timestamptz NOT NULL DEFAULT now()\n"
        ")",
        f'CREATE TABLE IF NOT EXISTS "{table}_rejected" (\n'
        "    kafka_partition integer NOT NULL,\n"
        "    kafka_offset bigint NOT NULL,\n"
        "    kafka_key bytea,\n"
        "    kafka_value bytea,\n"
        "    reason text NOT NULL,\n"
        "    rejected_at timestamptz NOT NULL DEFAULT now(),\n"
        "    PRIMARY KEY (kafka_partition, kafka_offset)\n"
        ")",
    ]


def upsert_sql(table: str) -> str:
    """The consumer rule as one statement: a row only moves to a higher revision."""
    return (
        f'INSERT INTO "{table}" AS t (id, revision, record, kafka_partition, kafka_offset)\n'
        "VALUES (%s, %s, %s, %s, %s)\n"
        "ON CONFLICT (id) DO UPDATE SET revision = excluded.revision,\n"
        "    record = excluded.record, kafka_partition = excluded.kafka_partition,\n"
        "    kafka_offset = excluded.kafka_offset, updated_at = now()\n"
        "WHERE t.revision < excluded.revision"
    )


@dataclass
class SinkCounts:
    """What the sink has done since it started (logged after each batch that wrote)."""

    batches: int = 0
    records: int = 0
    upserts: int = 0  # rows written (inserted, or moved to a higher revision)
    deletes: int = 0
    rejected: int = 0
    retries: int = 0  # transactions retried (deadlock, lost connection)


class PostgresSink:
    """A consumer-group member that lands ``topic`` in ``table`` (module doc).

    ``group``: the consumer group (two sinks of one group share the partitions); ``stop``: set
    it to end :meth:`run` after the batch in hand.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        dsn: str,
        table: str,
        group: str,
        auth: dict[str, Any] | None = None,
        max_records: int = 2000,
        idle_exit_s: float | None = None,
    ) -> None:
        self.bootstrap, self.topic, self.dsn, self.table = bootstrap, topic, dsn, table
        self.group, self.auth, self.max_records = group, auth or {}, max_records
        self.idle_exit_s = idle_exit_s
        self.counts = SinkCounts()
        self.stop = asyncio.Event()

    async def _connect(self) -> Any:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=False)
        async with conn.transaction():
            for stmt in create_sql(self.table):
                await conn.execute(stmt)
        return conn

    async def write(self, conn: Any, plan: BatchPlan) -> int:
        """One transaction (module doc, step 2); the rows it moved forward."""
        from psycopg.types.json import Jsonb

        moved = 0
        async with conn.transaction():
            async with conn.cursor() as cur:
                if plan.upserts:
                    await cur.executemany(
                        upsert_sql(self.table),
                        [
                            (u.id, u.revision, Jsonb(u.record), u.partition, u.offset)
                            for u in plan.upserts
                        ],
                        returning=False,
                    )
                    moved = cur.rowcount
                if plan.deletes:
                    await cur.execute(
                        f'DELETE FROM "{self.table}" WHERE id = ANY(%s)', (plan.deletes,)
                    )
                if plan.rejected:
                    await cur.executemany(
                        f'INSERT INTO "{self.table}_rejected" (kafka_partition, kafka_offset,'
                        " kafka_key, kafka_value, reason) VALUES (%s, %s, %s, %s, %s)"
                        " ON CONFLICT (kafka_partition, kafka_offset) DO NOTHING",
                        [(r.partition, r.offset, r.key, r.value, r.reason) for r in plan.rejected],
                    )
        return moved

    async def run(self) -> SinkCounts:
        """Consume until :attr:`stop` is set (or ``idle_exit_s`` pass without a record)."""
        import psycopg
        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import CommitFailedError, KafkaError

        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=self.max_records,
            **self.auth,
        )
        conn: Any = await self._connect()  # a wrong DSN fails here, before any record
        await consumer.start()
        idle, logged = 0.0, time.monotonic()
        try:
            while not self.stop.is_set():
                batch = await consumer.getmany(timeout_ms=500, max_records=self.max_records)
                records = [
                    (m.partition, m.offset, m.key, m.value) for msgs in batch.values() for m in msgs
                ]
                if not records:
                    idle += 0.5
                    if self.idle_exit_s is not None and idle >= self.idle_exit_s:
                        break
                    continue
                idle = 0.0
                plan = plan_batch(records)
                for r in plan.rejected:
                    log.warning(
                        "sink %s: record %s/%d rejected: %s",
                        self.table,
                        r.partition,
                        r.offset,
                        r.reason,
                    )
                while True:
                    try:
                        if conn is None:
                            conn = await self._connect()
                        moved = await self.write(conn, plan)
                        break
                    except (
                        psycopg.errors.DeadlockDetected,
                        psycopg.errors.SerializationFailure,
                    ) as exc:
                        self.counts.retries += 1
                        log.warning("sink %s: transaction retried: %r", self.table, exc)
                    except psycopg.OperationalError as exc:  # the server gone: wait for it
                        self.counts.retries += 1
                        log.warning("sink %s: reconnecting after %r", self.table, exc)
                        if conn is not None:
                            await conn.close()
                        conn = None
                        await asyncio.sleep(1.0)
                # step 3: offsets only after the transaction committed
                offsets = {tp: msgs[-1].offset + 1 for tp, msgs in batch.items() if msgs}
                try:
                    await consumer.commit(offsets)
                except (CommitFailedError, KafkaError) as exc:
                    # a rebalance took the partitions: their new owner re-reads the batch,
                    # which the rule makes harmless
                    log.warning(
                        "sink %s: offsets not committed (%r); redelivered to the "
                        "partitions' next owner",
                        self.table,
                        exc,
                    )
                c = self.counts
                c.batches += 1
                c.records += len(records)
                c.upserts += max(moved, 0)
                c.deletes += len(plan.deletes)
                c.rejected += len(plan.rejected)
                now = time.monotonic()
                if now - logged >= LOG_EVERY_S:
                    logged = now
                    log.info("sink %s: %s", self.table, c)
        finally:
            await consumer.stop()
            if conn is not None:
                await conn.close()
        return self.counts

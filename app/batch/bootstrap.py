"""``python -m app.batch bootstrap``: a join's dimension built by Spark from a catalogue
(Parquet, or the project's topic archives), as the workers' starting state: one row per
version in the join's ordered table (``V`` rows, :mod:`app.joins.keys`), its changelog and its
snapshots.

Why: a fresh worker builds a dimension table by reading its topic record by record (~30,000 a
second a worker); a 500-million-key catalogue takes hours, and every new partition owner replays
the changelog again. Flink's State Processor API writes a savepoint from a batch job; this writes
etj's equivalent, a snapshot of each table partition (docs/operating/snapshots.md), and the
changelog the snapshots stand for (docs/operating/bootstrap.md walks through it).

The job, in order (each step is what makes the next safe):

1. **Checks**: the join is one the workers run with ``rocksdb://``; the table's changelog holds
   no row (the first load), or only the rows of an earlier attempt of this job on the same
   inputs; the join's consumer group has no member (workers running now would write rows the
   snapshots do not hold), unless an earlier attempt's marker is there (its members joined
   after it, and wait). The dimension topic, if it exists, has the join's partition count.
2. **Marker** ``running`` in the snapshot store (:class:`app.state.snapshot_store.BootstrapMarker`): a
   worker that starts now waits, ready 503, until it is ``done``.
3. **Spark**: the catalogue read and validated as the batch twin reads the dimension topic's
   archives (records from the future refused and counted), each key placed in the partition
   Kafka's default partitioner gives its record key (:mod:`app.kafka.partitioner`: the partition its
   live records land in), one group per partition; each group's executor writes the rows to the
   changelog partition, builds the RocksDB database and uploads its snapshot
   (:mod:`app.batch.state_files`). Partitions are built in parallel, as many as the cluster has
   cores.
4. **Marker** ``done``, with the offsets: workers start from the snapshots.

Dimension records produced while the job runs wait in the topic; the workers read them after the
snapshots, as new versions beside the catalogue's: latest event time wins, an older catalogue
version never overrides a newer live one (it is one more version of the key, and the join rule
picks by event time). A failure leaves the marker ``failed`` (or ``running``, if the driver
died): workers keep waiting, and the job run again on the same inputs finishes the work (the
rows written twice are the same rows; the snapshot's offset is the last one).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.batch.archives import count_records
from app.batch.jobs import Scope, admit_input, spec_kinds
from app.batch.session import Steps
from app.batch.state_files import PartitionState, Target, arrow_version_rows, write_partition
from app.joins.spec import JoinSpec
from app.state.snapshot_store import BootstrapMarker, Snapshots

__all__ = ["BootstrapError", "Outcome", "bootstrap", "target_of"]

RESULT_SCHEMA = (
    "partition long, records long, keys long, first_offset long, "
    "last_offset long, changelog_bytes long, snapshot_bytes long, "
    "changelog_s double, database_s double, upload_s double"
)


class BootstrapError(RuntimeError):
    """The job must not run (its message says why and what to do)."""


@dataclass(frozen=True)
class Outcome:
    """What a run wrote."""

    job: str
    changelog: str
    partitions: list[PartitionState]
    refused: int  # catalogue records refused as from the future
    invalid: int  # catalogue records not loaded: a field missing, of another type, out of range
    seconds: float

    @property
    def keys(self) -> int:
        return sum(p.keys for p in self.partitions)

    @property
    def snapshot_bytes(self) -> int:
        return sum(p.snapshot_bytes for p in self.partitions)

    @property
    def changelog_bytes(self) -> int:
        return sum(p.changelog_bytes for p in self.partitions)


def target_of(spec: JoinSpec, settings: Any, snapshot_url: str, broker_url: str) -> Target:
    """Where the workers read ``spec``'s dimension from: its versions are rows of the join's
    ordered table (``V`` rows beside the joins); the worker's own table declaration
    (:mod:`app.topology`) gives its changelog topic and snapshot fingerprint."""
    from app.kafka.connection import bootstrap_servers
    from app.state.snapshot_service import table_fingerprint
    from app.topology import joins

    if not settings.local_tables:
        raise BootstrapError(
            f"ETJ_STORE_URL is {settings.store_url}: workers read snapshots with rocksdb:// only "
            "(run the job with the workers' ETJ_* settings)"
        )
    if spec.name not in joins:
        raise BootstrapError(
            f"the workers of this configuration do not run join {spec.name!r} "
            f"(they run {', '.join(joins) or 'none'}: ETJ_BUILTIN_JOINS, "
            "ETJ_JOINS_FILE)"
        )
    table = joins[spec.name].tables.joins
    partitions = table.partitions or settings.partitions
    return Target(
        changelog=table.changelog_topic.get_topic_name(),
        partitions=partitions,
        fingerprint=table_fingerprint(table, partitions),
        snapshot_url=snapshot_url,
        bootstrap_servers=bootstrap_servers(broker_url),
        settings=settings,
        # the worker's own limit (Faust's default 1,000,000): a row the job writes, the
        # worker can write again when a version is added
        max_row_bytes=settings.producer_max_request_bytes or 1_000_000,
    )


# --- checks on the broker ---------------------------------------------------------------------


async def _broker_state(
    target: Target,
    group: str,
    topics: Sequence[str],
) -> tuple[int, dict[str, dict[int, int]]]:
    """(members of ``group``, topic -> partition -> end offset for those of ``topics`` that
    exist)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.structs import TopicPartition

    from app.kafka.security import aiokafka_auth

    auth = aiokafka_auth(target.settings)
    admin = AIOKafkaAdminClient(bootstrap_servers=target.bootstrap_servers, **auth)
    await admin.start()
    try:
        described = await admin.describe_consumer_groups([group])
        # DescribeGroups v0-v5: (error_code, group_id, state, protocol_type, protocol,
        # members, ...); an unknown group answers with no member
        members = sum(len(g[5]) for r in described for g in r.groups if g[0] == 0)
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=target.bootstrap_servers, enable_auto_commit=False, **auth
    )
    await consumer.start()
    try:
        present = await consumer.topics()
        ends: dict[str, dict[int, int]] = {}
        for topic in topics:
            if topic in present:
                tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
                got = await consumer.end_offsets(tps)
                ends[topic] = {tp.partition: off for tp, off in got.items()}
        return members, ends
    finally:
        await consumer.stop()


async def _create_changelog(target: Target) -> None:
    """The changelog topic as Faust declares it (compacted, the table's partition count)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    from app.kafka.security import aiokafka_auth

    admin = AIOKafkaAdminClient(
        bootstrap_servers=target.bootstrap_servers, **aiokafka_auth(target.settings)
    )
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(
                    target.changelog,
                    target.partitions,
                    target.settings.replication_factor,
                    topic_configs={"cleanup.policy": "compact"},
                )
            ]
        )
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


def check(
    target: Target,
    spec: JoinSpec,
    snaps: Snapshots,
    inputs: Sequence[str],
    group: str,
    wait_group_s: float,
    steps: Steps,
) -> BootstrapMarker | None:
    """Step 1 of the module docstring; the marker of an unfinished earlier attempt (or None)."""
    marker = snaps.bootstrap(target.changelog)
    if marker is not None and marker.state == "done":
        raise BootstrapError(
            f"table {target.changelog} was bootstrapped by job {marker.job} (done "
            f"{time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime((marker.finished_ms or 0) / 1000))}"
            "): its state lives in its changelog and snapshots now. A catalogue's new versions "
            "go to the dimension topic"
        )
    if marker is not None and sorted(marker.inputs) != sorted(inputs):
        raise BootstrapError(
            f"an unfinished bootstrap of {target.changelog} (job {marker.job}, {marker.state}) "
            f"read {marker.inputs}: run it again on the same inputs (its rows are in the "
            "changelog already)"
        )
    deadline = time.monotonic() + wait_group_s
    while True:
        members, ends = asyncio.run(
            _broker_state(target, group, [target.changelog, spec.dimension.topic])
        )
        if not members:
            break
        if marker is not None:  # they joined after the marker: they wait for it, reading nothing
            steps.say(
                f"consumer group {group!r} has {members} member(s) waiting for the "
                f"unfinished bootstrap {marker.job}"
            )
            break
        if time.monotonic() >= deadline:
            raise BootstrapError(
                f"consumer group {group!r} has {members} member(s): stop the join's workers "
                "first (they would write rows the snapshots do not hold); a stopped worker stays "
                "a member for up to its session timeout"
            )
        steps.say(f"consumer group {group!r} has {members} member(s): waiting for it to empty")
        time.sleep(2)
    dim = ends.get(spec.dimension.topic)
    if dim is not None and len(dim) != target.partitions:
        raise BootstrapError(
            f"topic {spec.dimension.topic} has {len(dim)} partitions, join "
            f"{spec.name} {target.partitions}: the keys would be placed in "
            "partitions its records do not use"
        )
    written = {p: o for p, o in ends.get(target.changelog, {}).items() if o > 0}
    if written and marker is None:
        raise BootstrapError(
            f"changelog {target.changelog} holds rows already (end offsets {written}): the "
            "bootstrap builds a table's first state, before any worker wrote one"
        )
    return marker


# --- the Spark part ---------------------------------------------------------------------------


def _partition_of(partitions: int):  # a Column (this module's annotations are strings)
    """A column: the partition Kafka's default partitioner gives the key's UTF-8 bytes. An Arrow
    UDF (Spark 4.1+), else a pandas one (Spark 3.5); the annotations are set by hand because
    this module's are strings."""

    def placed(keys: list[str]) -> list[int]:
        from app.kafka.partitioner import partition_for

        return [partition_for(k.encode(), partitions) for k in keys]

    if hasattr(F, "arrow_udf"):
        import pyarrow as pa

        def by_arrow(keys):  # annotated below, by hand
            return pa.array(placed(keys.to_pylist()), pa.int32())

        by_arrow.__annotations__ = {"keys": pa.Array, "return": pa.Array}
        return F.arrow_udf(by_arrow, "int")  # type: ignore[call-overload]  # pyspark's stubs lack the documented form that infers the UDF type from the hints
    import pandas as pd

    def by_pandas(keys):  # annotated below, by hand
        return pd.Series(placed(keys.tolist()), dtype="int32")

    by_pandas.__annotations__ = {"keys": pd.Series, "return": pd.Series}
    return F.pandas_udf(by_pandas, "int")  # type: ignore[call-overload]  # pyspark's stubs lack the documented form that infers the UDF type from the hints


def _write_group(
    target: Target, columns: list[str], kinds: Sequence[str], workdir: str | None, table: Any
) -> Any:
    """One partition's records (an Arrow table) -> its state written; one result row."""
    import pyarrow as pa

    partition = table.column("_p")[0].as_py()
    rows = arrow_version_rows(table, columns)
    state = write_partition(target, partition, rows, table.num_rows, workdir)
    return pa.Table.from_pylist([asdict(state)])


def build(
    spark: SparkSession,
    spec: JoinSpec,
    paths: Sequence[str],
    scope: Scope,
    target: Target,
    workdir: str | None = None,
) -> tuple[DataFrame, DataFrame]:
    """(one result row per partition written, the records refused as from the future): lazy.
    One shuffle: the records go to their partition's group as they are; each group's executor
    gathers a key's versions (:func:`app.batch.state_files.arrow_rows`)."""
    from app.batch.spec_joins import key_column
    from app.joins.columns import model_columns

    records, refused = admit_input(
        spark, paths, spec_kinds(spec).dimension, spec.dimension.time, scope, None
    )
    d = spec.dimension
    # the join key as the workers key their state: an int's text, a composite key's JSON array
    columns = ["_key", d.time, *d.copy]
    kind_of = {c.name: c.kind for c in model_columns(d.model)}
    kinds = ["int", *(kind_of[f] for f in d.copy)]
    keyed = records.select(key_column(d).alias("_key"), d.time, *d.copy).withColumn(
        "_p", _partition_of(target.partitions)("_key")
    )

    def write(table: Any) -> Any:  # a function, not a partial: Spark reads its type hints
        return _write_group(target, columns, kinds, workdir, table)

    grouped = keyed.groupBy("_p")
    if hasattr(grouped, "applyInArrow"):  # Spark 4.0+: the group reaches the executor as Arrow
        written = grouped.applyInArrow(write, schema=RESULT_SCHEMA)
    else:  # Spark 3.5: as a pandas frame

        def write_pandas(pdf: Any) -> Any:
            import pyarrow as pa

            return write(pa.Table.from_pandas(pdf, preserve_index=False)).to_pandas()

        written = grouped.applyInPandas(write_pandas, schema=RESULT_SCHEMA)
    return written, refused


def bootstrap(
    spark: SparkSession,
    steps: Steps,
    spec: JoinSpec,
    paths: Sequence[str],
    scope: Scope,
    target: Target,
    group: str,
    wait_group_s: float = 60.0,
    workdir: str | None = None,
) -> Outcome:
    """The whole job (module docstring); :class:`BootstrapError` when it must not run."""
    t0 = time.monotonic()
    snaps = Snapshots(target.snapshot_url)
    inputs = sorted(paths)
    with steps.step(f"checking {target.changelog} and consumer group {group!r}"):
        earlier = check(target, spec, snaps, inputs, group, wait_group_s, steps)
        asyncio.run(_create_changelog(target))
    job = earlier.job if earlier is not None else uuid.uuid4().hex[:12]
    started = int(time.time() * 1000)
    snaps.mark_bootstrap(BootstrapMarker(target.changelog, job, "running", started, inputs))
    try:
        with steps.step(
            f"{spec.name}: catalogue -> {target.partitions} partitions of "
            f"{target.changelog} and their snapshots"
        ):
            written, refused = build(spark, spec, paths, scope, target, workdir)
            states = sorted(
                (PartitionState(**r.asDict()) for r in written.collect()), key=lambda s: s.partition
            )
            n_refused = refused.count()
            n_invalid = (
                count_records(spark, paths, spec_kinds(spec).dimension)
                - n_refused
                - sum(s.records for s in states)
            )
    except BaseException as exc:
        snaps.mark_bootstrap(
            BootstrapMarker(
                target.changelog,
                job,
                "failed",
                started,
                inputs,
                error=f"{type(exc).__name__}: {exc}"[:2000],
            )
        )
        raise
    outcome = Outcome(job, target.changelog, states, n_refused, n_invalid, time.monotonic() - t0)
    snaps.mark_bootstrap(
        BootstrapMarker(
            target.changelog,
            job,
            "done",
            started,
            inputs,
            finished_ms=int(time.time() * 1000),
            offsets={str(s.partition): s.last_offset for s in states},
            keys=outcome.keys,
        )
    )
    return outcome

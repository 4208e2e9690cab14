"""Extract and load: topic archives (JSON lines or Parquet) in, JSON lines or Parquet out.

An archive holds one record per line (JSON lines) or per row (Parquet) with the wire-contract
fields of its topic; ``faust -A app.main archive TOPIC OUT.jsonl`` (or ``OUT.parquet``: a
dataset partitioned by topic partition, read in parallel) writes one.
Records of the ``etj-late`` topic (``{"record": {...}, "horizon": ...}``) are unwrapped, so the
late topic's archive can be read as moods or as recommendations: each reader keeps the records
that have its fields.

Validation mirrors :mod:`app.inputs.records` as far as values allow (types strict, event times in
range, non-empty strings); what JSON cannot express as the schema's type becomes null and the
record is dropped, as the stream dead-letters it. The key check needs the record key, which an
archive does not keep: the ``archive`` command checks it while archiving the input topics.

On a cluster with Spark's Kafka connector (``spark-sql-kafka-0-10``, not obtainable here), read
a topic directly instead of an archive and hand the same transforms the parsed values::

    raw = (spark.read.format("kafka")
           .option("kafka.bootstrap.servers", "broker:9092")
           .option("subscribe", "etj-moods")
           .option("startingOffsets", "earliest").option("endingOffsets", "latest")
           .load())
    moods = conform(raw.select(F.from_json(F.col("value").cast("string"), MOOD_SCHEMA)
                               .alias("v"), F.col("offset").alias("_pos")).select("v.*", "_pos"),
                    MOODS)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from app.inputs.records import MAX_EVENT_TIME
from app.joins.columns import Column as WireColumn

#: columns an archive may have besides the record's fields: its offset in the topic partition
#: and its Kafka timestamp (epoch ms; absent from archives written before it was kept)
META = ("_offset", "_timestamp")


@dataclass(frozen=True)
class ArchiveKind:
    """The fields of one topic's records and which of them a valid record must have."""

    name: str
    ddl: str  # "name type, ..." in wire-contract field order; types: string, bigint, double
    required: tuple[str, ...]
    #: (field, max length) of strings that must be non-empty (app.inputs.records' limits)
    texts: tuple[tuple[str, int], ...] = ()
    #: the same for optional strings: null, or non-empty and not too long
    optional_texts: tuple[tuple[str, int], ...] = ()
    times: tuple[str, ...] = ("event_time",)
    ids: tuple[str, ...] = ()  # non-negative integers
    finite: tuple[str, ...] = ()  # floats that must be finite (no NaN, no infinity)
    unwrap: bool = True  # accept etj-late envelopes
    #: (field, min, max) string lengths, checked when the field is not null
    lengths: tuple[tuple[str, int | None, int | None], ...] = ()
    #: (field, smallest, first too big) integer bounds, checked when the field is not null
    bounds: tuple[tuple[str, int | None, int | None], ...] = ()
    #: a dimension's: the fields of an *end* (a tombstone: a row whose ``_end`` is true, with
    #: its key fields and its time, the last of these, and nothing else); empty: no ends
    ends: tuple[str, ...] = ()
    #: a foreign-key join's output: its deletes (a tombstone: ``_key``, the left key's text,
    #: and ``_deleted_at``, the end's time; app.commands.archive) are kept
    deletes: bool = False

    @property
    def schema(self) -> StructType:
        return StructType(
            [StructField(n, _TYPES[t]()) for n, t in (f.split() for f in self.ddl.split(","))]
        )

    @property
    def fields(self) -> list[str]:
        return self.schema.fieldNames()


_TYPES = {"string": StringType, "bigint": LongType, "double": DoubleType, "boolean": BooleanType}
_DDL = {"str": "string", "int": "bigint", "float": "double", "bool": "boolean", "json": "string"}


def kind_of(
    name: str,
    columns: Sequence[WireColumn],
    unwrap: bool = True,
    ends: tuple[str, ...] = (),
    deletes: bool = False,
) -> ArchiveKind:
    """The archive kind of a topic whose records have ``columns`` (:mod:`app.joins.columns`:
    a join spec's events, dimension or output): the same checks as its wire model; ``ends``:
    a dimension's end fields (:attr:`ArchiveKind.ends`); ``deletes``: a foreign-key output's
    (:attr:`ArchiveKind.deletes`)."""
    return ArchiveKind(
        name,
        ", ".join(f"{c.name} {_DDL[c.kind]}" for c in columns),
        tuple(c.name for c in columns if c.required),
        times=(),
        finite=tuple(c.name for c in columns if c.finite),
        unwrap=unwrap,
        lengths=tuple(
            (c.name, c.min_length, c.max_length)
            for c in columns
            if c.min_length is not None or c.max_length is not None
        ),
        bounds=tuple(
            (c.name, c.ge, _within_bigint(c.lt))
            for c in columns
            if c.ge is not None or _within_bigint(c.lt) is not None
        ),
        ends=ends,
        deletes=deletes,
    )


def _within_bigint(lt: int | None) -> int | None:
    """An upper bound a bigint column can break (an id's ``le=2**63-1`` is none: Spark cannot
    even be handed 2**63 as a literal)."""
    return lt if lt is not None and lt <= 2**63 - 1 else None


MOODS = ArchiveKind(
    "moods",
    "name string, mood string, event_time bigint, ingestion_time bigint",
    ("name", "mood", "event_time"),
    (("name", 200), ("mood", 200)),
)
EVENTS = ArchiveKind(
    "events",
    "consultant string, recommendation string, event_time bigint, id string, ingestion_time bigint",
    ("consultant", "recommendation", "event_time"),
    (("consultant", 200), ("recommendation", 10_000)),
    optional_texts=(("id", 200),),
)
REVISIONS = ArchiveKind(
    "revisions",
    "id string, consultant string, event_time bigint, recommendation string, mood string, "
    "mood_event_time bigint, revision bigint, previous_mood string, cause string",
    ("id", "consultant", "event_time", "recommendation", "revision"),
    unwrap=False,
)
CARS = ArchiveKind(
    "car arrivals",
    "car_id bigint, to_zone_id bigint, fuel_level double, event_time bigint",
    ("car_id", "to_zone_id", "fuel_level", "event_time"),
    ids=("car_id", "to_zone_id"),
    finite=("fuel_level",),
)
ZONES = ArchiveKind(
    "zones",
    "zone_id bigint, pollution_level double, event_time bigint",
    ("zone_id", "pollution_level", "event_time"),
    ids=("zone_id",),
    finite=("pollution_level",),
)
CAR_POLLUTION = ArchiveKind(
    "car pollution",
    "car_id bigint, zone_id bigint, fuel_level double, pollution_level double, "
    "car_event_time bigint, zone_event_time bigint",
    ("car_id", "zone_id", "car_event_time"),
    times=("car_event_time",),
    unwrap=False,
)

MOOD_SCHEMA = MOODS.schema  # for from_json on a Kafka source, see the module docstring


def _is_parquet(path: str) -> bool:
    """``*.parquet``, or a local directory holding Parquet files (or ``key=value`` folders of
    them, as the ``archive`` command writes: ``partition=3/part-00000.parquet``)."""
    p = path.rstrip("/")
    if p.endswith(".parquet"):
        return True
    if not os.path.isdir(p):
        return False
    for entry in os.scandir(p):
        if entry.name.endswith(".parquet"):
            return True
        if (
            entry.is_dir()
            and "=" in entry.name
            and any(f.endswith(".parquet") for f in os.listdir(entry.path))
        ):
            return True
    return False


def _read_parquet(spark: SparkSession, path: str, kind: ArchiveKind) -> DataFrame:
    """A Parquet archive: typed columns, or the JSON values of a ``value`` column (topics the
    ``archive`` command has no schema for, e.g. etj-late: parsed, envelopes unwrapped)."""
    df = spark.read.parquet(path)
    if "value" in df.columns and not set(kind.required) & set(df.columns):
        schema = kind.schema
        if kind.unwrap:
            schema = schema.add("record", kind.schema)
        meta = [c for c in (*META, "_end", "_key", "_deleted_at") if c in df.columns]
        df = df.select(F.from_json("value", schema).alias("v"), *meta).select("v.*", *meta)
        if kind.unwrap:
            df = _unwrap(df, kind, keep=meta)
    return df


def conform(df: DataFrame, kind: ArchiveKind) -> DataFrame:
    """Select ``kind``'s fields (cast; missing ones null), keep ``_pos``, drop invalid records.

    ``_timestamp`` (the record's Kafka timestamp) is kept, null when the archive has none.
    """
    fields = kind.schema.fields
    present = set(df.columns)
    # try_cast: a Parquet column of another type yields null (-> dropped), not an ANSI error
    cols = [
        (
            F.expr(f"try_cast(`{f.name}` as {f.dataType.simpleString()})")
            if f.name in present
            else F.lit(None).cast(f.dataType)
        ).alias(f.name)
        for f in fields
    ]
    if "_pos" in present:
        cols.append(F.col("_pos"))
    cols.append(
        (
            F.col("_timestamp").cast("bigint")
            if "_timestamp" in present
            else F.lit(None).cast("bigint")
        ).alias("_timestamp")
    )
    if kind.ends:  # a tombstone's end: its key and time only (app.batch.spec_joins)
        ended = F.col("_end") if "_end" in present else F.lit(None)
        cols.append(F.coalesce(ended.cast("boolean"), F.lit(False)).alias("_end"))
    if kind.deletes:  # a foreign-key output's delete: the left key's text and its time
        for name, kind_ in (("_key", "string"), ("_deleted_at", "bigint")):
            cols.append((F.col(name) if name in present else F.lit(None)).cast(kind_).alias(name))
    out = df.select(*cols)
    valid: Column = F.lit(True)
    for name in kind.required:
        valid = valid & F.col(name).isNotNull()
    for name, longest in kind.texts:
        valid = valid & (F.length(name) >= 1) & (F.length(name) <= longest)
    for name, longest in kind.optional_texts:
        valid = valid & (F.col(name).isNull() | F.length(name).between(1, longest))
    for name in kind.times:
        valid = valid & (F.col(name) >= 0) & (F.col(name) < MAX_EVENT_TIME)
    for name in kind.ids:
        valid = valid & (F.col(name) >= 0)
    for name in kind.finite:
        valid = valid & (F.col(name).isNull() | (~F.isnan(name) & (F.abs(name) < float("inf"))))
    for name, min_length, max_length in kind.lengths:  # each may be None: no such bound
        length = F.length(name)
        ok = F.lit(True)
        if min_length is not None:
            ok = ok & (length >= min_length)
        if max_length is not None:
            ok = ok & (length <= max_length)
        valid = valid & (F.col(name).isNull() | ok)
    for name, smallest, too_big in kind.bounds:
        ok = F.lit(True)
        if smallest is not None:
            ok = ok & (F.col(name) >= smallest)
        if too_big is not None:
            ok = ok & (F.col(name) < too_big)
        valid = valid & (F.col(name).isNull() | ok)
    if kind.ends:
        valid = F.when(F.col("_end"), _end_valid(kind)).otherwise(valid)
    if kind.deletes:
        valid = F.when(F.col("_deleted_at").isNotNull(), F.col("_key").isNotNull()).otherwise(valid)
    return out.where(valid)


def _end_valid(kind: ArchiveKind) -> Column:
    """An end row's checks: its key fields and time set, the time in range, the key fields'
    own bounds (its copied fields are null: a tombstone has no value)."""
    *keys, time = kind.ends
    ok = F.col(time).isNotNull() & (F.col(time) >= 0) & (F.col(time) < MAX_EVENT_TIME)
    for name in keys:
        ok = ok & F.col(name).isNotNull()
    for name, min_length, max_length in kind.lengths:
        if name in keys and min_length is not None:
            ok = ok & (F.length(name) >= min_length)
        if name in keys and max_length is not None:
            ok = ok & (F.length(name) <= max_length)
    for name, smallest, too_big in kind.bounds:
        if name in keys and smallest is not None:
            ok = ok & (F.col(name) >= smallest)
        if name in keys and too_big is not None:
            ok = ok & (F.col(name) < too_big)
    return ok


def read_archive(spark: SparkSession, paths: str | Sequence[str], kind: ArchiveKind) -> DataFrame:
    """Read one or more archives (JSON lines files/dirs or Parquet) as ``kind``'s records.

    ``_pos`` is each record's position: archive order (the topic's log order per partition,
    which is all a consumer relies on) — latest-revision rules use it to break ties. A Parquet
    archive of the ``archive`` command has each record's offset (``_offset``): its position
    within the topic partition, which is where every revision of one join id is.
    ``_timestamp``: each record's Kafka timestamp when the archive kept it (JSON lines: a
    ``_timestamp`` field of the line; Parquet: a column), else null — what the rule on records
    from the future (:mod:`app.logic.future_records`) holds event times against.
    """
    if isinstance(paths, str):
        paths = [paths]
    parts = []
    for i, path in enumerate(paths):
        if _is_parquet(path):
            df = _read_parquet(spark, path, kind)
        else:
            schema = kind.schema
            if kind.unwrap:
                schema = schema.add("record", kind.schema)
            schema = schema.add("_timestamp", LongType())
            if kind.ends:
                schema = schema.add("_end", BooleanType())
            if kind.deletes:
                schema = schema.add("_key", StringType()).add("_deleted_at", LongType())
            df = spark.read.schema(schema).option("mode", "PERMISSIVE").json(path)
            if kind.unwrap:
                df = _unwrap(df, kind, keep=["_timestamp", *(["_end"] if kind.ends else [])])
        order = (
            F.col("_offset") if "_offset" in df.columns else F.monotonically_increasing_id()
        )  # the offset, else the line
        pos = F.lit(i << 54).cast("bigint") + order  # the archive first
        parts.append(conform(df.withColumn("_pos", pos), kind))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def count_records(spark: SparkSession, paths: str | Sequence[str], kind: ArchiveKind) -> int:
    """How many records the archives hold, valid or not (a JSON line that does not parse
    counts as one): with what :func:`read_archive` keeps, how many it dropped as invalid."""
    if isinstance(paths, str):
        paths = [paths]
    total = 0
    for path in paths:
        if _is_parquet(path):
            total += _read_parquet(spark, path, kind).count()
        else:
            total += spark.read.text(path).where(F.trim("value") != "").count()
    return total


def _unwrap(df: DataFrame, kind: ArchiveKind, keep: Sequence[str] = ()) -> DataFrame:
    """An etj-late envelope carries the record under ``record``: prefer it when present."""
    return df.select(
        *[
            F.when(F.col("record").isNotNull(), F.col(f"record.{n}")).otherwise(F.col(n)).alias(n)
            for n in kind.fields
        ],
        *keep,
    )


def write_table(df: DataFrame, path: str) -> None:
    """Load: ``*.parquet`` -> a Parquet dataset (directory); ``*.jsonl``/``*.json`` -> ONE local
    JSON lines file (sorted by the first column, for diffs); anything else -> a directory of
    JSON lines part files (the scalable form for a cluster's file system).

    JSON keeps null fields (``"mood": null``), as the wire contract writes them.
    """
    if path.rstrip("/").endswith(".parquet"):
        df.write.mode("overwrite").parquet(path)
        return
    writer_opts = {"ignoreNullFields": "false"}
    if not path.endswith((".jsonl", ".json")):
        df.write.mode("overwrite").options(**writer_opts).json(path)
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".etj-", dir=target.parent)
    try:
        (
            df.orderBy(df.columns[0])
            .coalesce(1)
            .write.mode("overwrite")
            .options(**writer_opts)
            .json(os.path.join(tmp, "out"))
        )
        part = next(Path(tmp, "out").glob("part-*"), None)
        if part is None:  # an empty DataFrame writes no part file
            target.write_text("")
        else:
            os.replace(part, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

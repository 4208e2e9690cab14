"""Tool: ``faust -A app.main archive TOPIC OUT`` — a topic, start to end, as JSON lines/Parquet.

The batch twin (``python -m app.batch``) reads these archives, so the whole loop — stream,
archive, exact answer, reconcile, backfill — runs on one machine without Spark's Kafka
connector. Two forms (docs/batch/index.md):

- ``OUT.jsonl`` (or ``-``): one line per record, the record's JSON value (the wire-contract
  fields); each partition's records in log order, partitions interleaved. One file: fine for
  tests and small topics, but Spark reads one JSON lines file with one task per 128 MB split.
- ``OUT.parquet`` (or ``--format parquet``): a Parquet dataset, one directory per topic
  partition (``OUT/partition=3/part-00000.parquet``, a new file every ``--rows-per-file``
  records) with the topic's typed columns plus ``_offset`` (the record's offset: log order
  within its partition, which is all a consumer relies on). Spark reads every file in
  parallel and only the columns a job needs: a month of a topic is as many tasks as files.
  Topics without a known schema (late, dead letters) keep each JSON value in a ``value``
  column. Needs pyarrow (the ``batch`` extra); the worker image does not have it.

Each record keeps its Kafka timestamp (epoch ms): a ``_timestamp`` field of the JSON line, a
``_timestamp`` column in Parquet (absent when the record has none), so the batch twin holds
each record to the rule on records from the future (:mod:`app.logic.future_records`) against the same
timestamp the stream saw.

Input topics of the joins — every join the worker runs: the built-in ones, the car join's and
every spec of ``ETJ_JOINS_FILE`` — are validated exactly as the worker validates them (by the
spec's wire model, key check included, which an archive cannot repeat later): records the worker
dead-letters are left out and counted, so the batch answer is computed from what the stream
accepted. A tombstone (null value) the worker reads as a delete is kept as what it means: on a
dimension or a foreign-key side an *end row* (``{<key fields>, <time>: its Kafka timestamp,
"_end": true}``), on a foreign-key output a delete (``{"_key": ..., "_deleted_at": ...}``, from
its ``etj-deleted-at`` header). Other topics (outputs, late, dead letters) are written as they
are. A topic written
otherwise than JSON text (a side's ``format`` ``avro``, ``protobuf``, ``json-sr`` or a binary
``key_format``; a spec's ``output_format``) is decoded by the worker's own decoders
(:mod:`app.inputs.wire_formats`, the writer schemas fetched before each fetch's records are
read), so every archive holds JSON and the batch twin joins it as any spec's.

``--from``/``--to`` (an event-time range) keep what the joins of the events in the range need
(:func:`app.logic.event_range.needs`): events and output revisions in the range, dimension
versions before its end (all of them for ``at-or-before-else-earliest``); other topics whole.

Where the log ends: brokers may under-report end offsets (tansu,
docs/contributing/tests.md#the-test-broker), so the archive reads to the reported end *and
then* until no record came for ``--idle-s`` seconds.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from faust.cli import argument, option

from app.commands.archive_sinks import JsonLinesSink, ParquetSink, Sink
from app.faust_app import app, settings
from app.inputs.parsers import as_dict
from app.inputs.records import CarArrivalIn, InvalidRecord, WireModel, ZoneIn, parse
from app.inputs.tombstones import side_end_reader
from app.inputs.wire_formats import value_decoder
from app.joins.catalog import batch_fk_specs, batch_specs, load_fk_specs, load_specs, topic_roles
from app.joins.columns import fk_output_columns, model_columns, output_columns
from app.joins.rekey import any_key_parser
from app.joins.resolve import refuse_without_registry
from app.joins.spec import Side
from app.kafka.connection import bootstrap_servers
from app.kafka.schema_registry import shared_registry
from app.kafka.security import aiokafka_auth
from app.logic.event_range import EventRange, Role, needs, parse_time
from app.logic.fk_join import DELETED_AT
from app.logic.future_records import kafka_timestamp


@dataclass
class ArchiveStats:
    read: int = 0
    written: int = 0
    invalid: int = 0  # input records the worker would dead-letter
    not_json: int = 0  # other topics: values that are not JSON (or are null)
    out_of_range: int = 0  # records the event-time range does not need


def input_models() -> dict[str, type[WireModel] | Side]:
    """Topic -> the model the worker validates its records with: both inputs of every join
    spec (ETJ_JOINS_FILE's, and every built-in one, which the batch twin computes by name
    whether or not this configuration's worker runs it), and the car join's. A spec side shaped
    otherwise (nested paths, another time format, ``$timestamp``) is given as its
    :class:`~app.joins.spec.Side`: its records are archived as the worker reads them, flat with
    an epoch-ms time, so the batch twin reads them as any spec's (one parser for both); so is a
    repartitioned side (any record key), whose own topic is archived, read as its hop reads it."""
    models: dict[str, type[WireModel] | Side] = {
        settings.car_arrivals_topic: CarArrivalIn,
        settings.zones_topic: ZoneIn,
    }
    specs = batch_specs(settings).values()
    outputs = {spec.output for spec in specs}  # another's events (app.joins.chains): kept whole
    for spec in specs:
        for side in (s for s in (spec.events, spec.dimension) if s.topic not in outputs):
            written_otherwise = side.format != "json" or side.key_format != "str"
            read_as_worker = side.shaped or side.repartition or side.time_given
            ends = side is spec.dimension and not side.repartition  # tombstones: its ends
            models[side.topic] = side if read_as_worker or written_otherwise or ends else side.model
    for fk in batch_fk_specs(settings).values():  # foreign-key joins, the car join among them
        for side in (fk.left, fk.right):  # a user's: its tombstones are archived as ends
            models[side.topic] = side if side.shaped or fk.name != "cars" else side.model
    return models


def _ended_topics() -> frozenset[str]:
    """The topics whose tombstones are ends (a dimension not repartitioned): archived as
    ``{<key fields>, <time>: its Kafka timestamp, "_end": true}`` (app.inputs.tombstones), the
    batch twin's end rows (app.batch.spec_joins). Asked per tombstone, not cached: they are
    rare, and the settings are the command's (a test's)."""
    return frozenset(
        [
            *(
                spec.dimension.topic
                for spec in batch_specs(settings).values()
                if not spec.dimension.repartition
            ),
            *(
                side.topic
                for fk in batch_fk_specs(settings).values()
                if fk.name != "cars"  # the car join takes no deletes
                for side in (fk.left, fk.right)
            ),
        ]
    )


def _end_value(side: Side, key: bytes | None, timestamp: int | None) -> dict[str, Any] | None:
    """A dimension's tombstone as its archive's end row (None: one the worker refuses)."""
    try:
        end = side_end_reader(side, shared_registry(settings))(key, timestamp)
    except InvalidRecord:
        return None
    parts = orjson.loads(end.key) if side.key_fields else [end.key]
    kinds = side.key_kinds
    row: dict[str, Any] = {
        f: int(v) if kind == "int" and isinstance(v, str) else v
        for f, v, kind in zip(side.key_parts, parts, kinds)
    }
    row[side.time] = end.event_time
    row["_end"] = True
    return row


def _deleted_value(key: bytes | None, headers: Any) -> dict[str, Any] | None:
    """A foreign-key join's delete on its output (a tombstone with header ``etj-deleted-at``,
    app.agents.fk_join) as its archive row: ``{"_key": the left key's text, "_deleted_at":
    the end's time}``; None: any other null value (nothing to keep)."""
    at = next((v for k, v in headers or () if k == DELETED_AT), None)
    if key is None or at is None:
        return None
    return {"_key": key.decode("utf-8", errors="replace"), "_deleted_at": int(at)}


def _side_parser(side: Side) -> Any:
    return _parser_of(side, shared_registry(settings))


@functools.cache
def _parser_of(side: Side, schemas: Any) -> Any:
    """A side's parser of its own topic (its keys as :attr:`Side.key_format` says); a
    repartitioned side's topic is keyed by anything, and read as the hop reads it
    (:func:`app.joins.rekey.any_key_parser`). A side written otherwise than JSON text is
    decoded with its writer schemas (fetched before each fetch's records: :func:`framing`)."""
    if side.repartition:
        return any_key_parser(side, schemas)
    return side.parser(schemas, key_format=side.key_format)


def framing(topic: str) -> tuple[str | None, str | None]:
    """(the keys' framed format, the values') of a topic of the joins (None: not framed): an
    input side's, or an output whose ``output_format`` is Avro or JSON-SR; refused with the
    worker's words when no registry is set."""
    specs = list(batch_specs(settings).values())
    for spec in specs:
        framed: tuple[str | None, str | None] = (None, None)
        for side in (spec.events, spec.dimension):
            if side.topic == topic:
                framed = (
                    "avro" if side.key_format == "avro" else None,
                    None if side.format == "json" else side.format,
                )
        if spec.output == topic and spec.output_format != "json":
            framed = (None, spec.output_format)
        if framed != (None, None):
            refuse_without_registry([spec], settings.schema_registry_url)
            return framed
    return None, None


@functools.cache
def _output_decoder(fmt: str, schemas: Any) -> Any:
    return value_decoder(fmt, schemas)


#: Parquet columns of the car join's topics (field, arrow type), wire-contract order; the same
#: fields as app.batch.archives' kinds. A join spec's topics: from its wire models
#: (:mod:`app.joins.columns`). Other topics: one ``value`` column (JSON).
_CAR_OUT = [
    ("car_id", "int64"),
    ("zone_id", "int64"),
    ("fuel_level", "double"),
    ("pollution_level", "double"),
    ("car_event_time", "int64"),
    ("zone_event_time", "int64"),
]


def parquet_columns(topic: str) -> list[tuple[str, str]] | None:
    """The typed columns of ``topic``'s records, or None: keep the JSON value as a string."""
    known: dict[str, list[tuple[str, str]]] = {
        settings.car_arrivals_topic: [
            ("car_id", "int64"),
            ("to_zone_id", "int64"),
            ("fuel_level", "double"),
            ("event_time", "int64"),
        ],
        settings.zones_topic: [
            ("zone_id", "int64"),
            ("pollution_level", "double"),
            ("event_time", "int64"),
        ],
        settings.car_pollution_topic: _CAR_OUT,
    }
    for fk in load_fk_specs(settings):
        if fk.name != "cars":  # the car join's columns are the ones above (Id: int64)
            for t, cols in (
                (fk.left.topic, model_columns(fk.left.model)),
                (fk.right.topic, model_columns(fk.right.model)),
                (fk.output, fk_output_columns(fk)),
            ):
                known[t] = [(c.name, c.arrow) for c in cols]
            known[fk.left.topic].append(("_end", "bool"))  # tombstones: ends and deletes
            known[fk.right.topic].append(("_end", "bool"))
            known[fk.output] += [("_key", "string"), ("_deleted_at", "int64")]
    for spec in load_specs(settings):
        for t, cols in (
            (spec.events.topic, model_columns(spec.events.model)),
            (spec.dimension.topic, model_columns(spec.dimension.model)),
            (spec.output, output_columns(spec)),
        ):
            known[t] = [(c.name, c.arrow) for c in cols]
        if not spec.dimension.repartition:  # its ends (tombstones): _end true
            known[spec.dimension.topic].append(("_end", "bool"))
    return known.get(topic)


def range_roles(topic: str) -> list[tuple[Role, str | None]]:
    """(role, event-time field) of ``topic`` in every join (none: the topic is kept whole)."""
    return topic_roles(load_specs(settings)).get(topic, [])


def in_range(r: EventRange, roles: Sequence[tuple[Role, str | None]], value: Any) -> bool:
    """Does the range need this (validated or JSON) value? Kept when any role needs it."""
    if not r.bounded or not roles:
        return True
    record = value.get("record", value) if isinstance(value, dict) else None
    if not isinstance(record, dict):
        return True
    for role, field in roles:
        t = record.get(field) if field else None
        if not isinstance(t, int) or isinstance(t, bool):
            t = None
        if needs(r, role, t):
            return True
    return False


def archive_value(
    model: type[WireModel] | Side | None,
    key: bytes | None,
    value: bytes | None,
    timestamp: int | None = None,
    framed: str | None = None,
    headers: Any = None,
) -> Any:
    """One record -> its archived JSON value, or None when it is left out. ``timestamp``: its
    Kafka timestamp (the event time of a ``$timestamp`` side); ``framed``: the format of an
    output topic written otherwise than JSON text (``avro``, ``json-sr``), archived as its JSON
    twin; ``headers``: its Kafka headers (a side's ``$header.<name>`` fields)."""
    if model is None and framed is not None:
        try:
            return _output_decoder(framed, shared_registry(settings))(value)
        except InvalidRecord:
            return None
    if value is None and isinstance(model, Side) and model.topic in _ended_topics():
        return _end_value(model, key, timestamp)
    if value is None and model is None:  # a foreign-key join's delete of a left key?
        return _deleted_value(key, headers)
    if model is not None:
        try:
            if isinstance(model, Side):
                record = _side_parser(model)(key, value, timestamp, headers)
            else:
                record = parse(model, key, value)
        except InvalidRecord:
            return None
        # a Struct (a flat side's fast parser) or a wire model: its fields, nulls left out
        return {k: v for k, v in as_dict(record).items() if v is not None}
    if value is None:
        return None
    try:
        data: Any = json.loads(value)
    except ValueError:
        return None
    return data


def archive_line(
    model: type[WireModel] | Side | None,
    key: bytes | None,
    value: bytes | None,
) -> str | None:
    """One record -> its archive line, or None when it is left out."""
    data = archive_value(model, key, value)
    return None if data is None else json.dumps(data, separators=(",", ":"))


@dataclass
class _Fetched:
    """A fetch's records of one partition, as :meth:`SchemaRegistry.prefetch_batches` reads
    a batch."""

    topic: str
    records: list[Any]


def open_sink(out: str | Path, fmt: str, topic: str, rows_per_file: int = 1_000_000) -> Sink:
    """``fmt``: ``jsonl``, ``parquet``, or ``auto`` (Parquet when OUT ends with .parquet)."""
    if fmt == "auto":
        fmt = "parquet" if str(out).rstrip("/").endswith(".parquet") else "jsonl"
    if fmt == "parquet":
        if str(out) == "-":
            raise SystemExit("archive: Parquet cannot go to stdout")
        return ParquetSink(out, parquet_columns(topic), rows_per_file)
    return JsonLinesSink(out)


async def archive_topic(
    broker_url: str,
    topic: str,
    out: str | Path,
    model: type[WireModel] | Side | None = None,
    idle_s: float = 2.0,
    stall_s: float = 120.0,
    progress_s: float | None = 5.0,
    fmt: str = "auto",
    rows_per_file: int = 1_000_000,
    event_range: EventRange = EventRange(),
    roles: list[tuple[Role, str | None]] | None = None,
) -> ArchiveStats:
    """Write every record of ``topic`` to ``out`` (``-`` = stdout) as JSON lines or Parquet.

    Records are written as they are read (memory stays flat on big topics: Parquet buffers at
    most a file's rows per partition); each partition's records keep their log order.
    ``progress_s``: a progress line on stderr this often. ``event_range`` and ``roles``
    (the topic's roles in the joins, :func:`range_roles`): keep only what the range needs.
    """
    key_framed, value_framed = framing(topic)
    schemas = shared_registry(settings) if (key_framed or value_framed) else None
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers(broker_url),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **aiokafka_auth(settings),
    )
    await consumer.start()
    stats = ArchiveStats()
    try:
        if topic not in await consumer.topics():
            raise SystemExit(f"archive: topic {topic!r} does not exist")
        parts = [
            TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        total = sum(ends.values())
        sink = open_sink(out, fmt, topic, rows_per_file)
        try:
            last = shown = time.monotonic()
            while True:
                batch = await consumer.getmany(timeout_ms=200)
                if schemas is not None:  # the writer schemas first, as the worker does
                    await schemas.prefetch_batches(
                        {topic: (key_framed, value_framed)},
                        [_Fetched(topic, msgs) for msgs in batch.values()],
                    )
                for tp, msgs in batch.items():
                    for m in msgs:
                        _archive_one(
                            sink,
                            tp.partition,
                            m.offset,
                            model,
                            m.key,
                            m.value,
                            stats,
                            kafka_timestamp(m.timestamp),
                            event_range,
                            roles or [],
                            value_framed if model is None else None,
                            m.headers,
                        )
                        last = time.monotonic()
                now = time.monotonic()
                if progress_s is not None and now - shown >= progress_s:
                    print(
                        f"archive: {topic}: {stats.read}/{total}+ records read",
                        file=sys.stderr,
                        flush=True,
                    )
                    shown = now
                at_end = all([await consumer.position(tp) >= ends[tp] for tp in parts])
                if at_end and now - last >= idle_s:
                    break
                if not at_end and now - last >= stall_s:
                    raise SystemExit(
                        f"archive: {topic}: no record for {stall_s}s before the "
                        f"end ({stats.read} of {total} read)"
                    )
        finally:
            sink.close()
    finally:
        await consumer.stop()
    return stats


def _archive_one(
    sink: Sink,
    partition: int,
    offset: int,
    model: type[WireModel] | Side | None,
    key: bytes | None,
    value: bytes | None,
    stats: ArchiveStats,
    timestamp: int | None = None,
    event_range: EventRange = EventRange(),
    roles: Sequence[tuple[Role, str | None]] = (),
    framed: str | None = None,
    headers: Any = None,
) -> None:
    stats.read += 1
    data = archive_value(model, key, value, timestamp, framed, headers)
    if data is None:
        if model is not None:
            stats.invalid += 1
        else:
            stats.not_json += 1
        return
    if not in_range(event_range, roles, data):
        stats.out_of_range += 1
        return
    sink.write(partition, offset, data, timestamp)
    stats.written += 1


@app.command(
    argument("topic"),
    argument("out"),
    option(
        "--idle-s",
        type=float,
        default=2.0,
        help="After the reported end, stop once no record came for this long.",
    ),
    option("--quiet", is_flag=True, default=False, help="No progress lines on stderr."),
    option(
        "--raw",
        is_flag=True,
        default=False,
        help="Input topics too: write every JSON value, without the worker's validation.",
    ),
    option(
        "--format",
        "fmt",
        type=click.Choice(["auto", "jsonl", "parquet"]),
        default="auto",
        help="auto: Parquet when OUT ends with .parquet, else JSON lines.",
    ),
    option(
        "--rows-per-file",
        type=int,
        default=1_000_000,
        help="Parquet: a new file per partition every this many records.",
    ),
    option(
        "--from",
        "start",
        default=None,
        metavar="TIME",
        help="Event-time range: what the joins of events at or after TIME need (epoch ms "
        "or ISO, e.g. 2026-10-01); dimension versions before it are kept.",
    ),
    option(
        "--to",
        "end",
        default=None,
        metavar="TIME",
        help="Event-time range: what the joins of events before TIME need.",
    ),
)
async def archive(
    self: object,
    topic: str,
    out: str,
    idle_s: float,
    quiet: bool,
    raw: bool,
    fmt: str,
    rows_per_file: int,
    start: str | None,
    end: str | None,
) -> None:
    """Archive TOPIC (from its start) to OUT as JSON lines or Parquet, for the batch jobs."""
    try:
        event_range = EventRange(
            None if start is None else parse_time(start), None if end is None else parse_time(end)
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    model = None if raw else input_models().get(topic)
    stats = await archive_topic(
        settings.broker_url,
        topic,
        out,
        model,
        idle_s,
        progress_s=None if quiet else 5.0,
        fmt=fmt,
        rows_per_file=rows_per_file,
        event_range=event_range,
        roles=range_roles(topic),
    )
    left_out = (
        f", {stats.invalid} invalid left out"
        if model is not None
        else f", {stats.not_json} non-JSON left out"
    )
    if event_range.bounded:
        left_out += f", {stats.out_of_range} outside what the event-time range needs"
    print(f"archive: {stats.written} records of {topic} -> {out}{left_out}", file=sys.stderr)

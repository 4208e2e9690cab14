"""Every topic and table etj uses, declared in one place from the list of join specs.

Data flow (read top to bottom): input topics -> one agent per join (app.agents) -> tables ->
output topics; revisit ticks (app.timers) come back in through each join's own ticks topic.

- Each join spec (the built-in ``moods`` and ``movies``, and every spec of ``ETJ_JOINS_FILE``,
  :mod:`app.joins.catalog`) gets the same shape, :class:`JoinTopology`: its events, dimension
  and ticks topics read by ONE agent (one sequential loop per worker owns both sides of a key;
  an input topic may be another join's input too: each join's agent is handed every record,
  :mod:`app.compat.consumer`),
  its output revision log, and three tables named by the spec (:mod:`app.joins.state`); a side
  with ``"repartition": true`` adds a :class:`RepartitionHop`: its topic read by a hop agent
  (:mod:`app.agents.repartition`) that re-keys it into an internal repartition topic, which the
  join's agent reads in its place.
- Each foreign-key spec (one-to-many: the built-in car join, car positions × zone pollution,
  and any ``"kind": "foreign-key"`` spec of ``ETJ_JOINS_FILE``) is one :class:`FkJoinTopology`:
  two agents, the left side reading its topic and sending moves keyed by the right key, the
  right side reading the right topic, the moves and its ticks, co-partitioned by right key;
  three tables (:mod:`app.joins.fk_state`).
- Each of them says what it adds to the worker's lists (co-partitioned groups, topics others
  produce to, internal topics, ticks topics), which are made from :data:`running`.
- Every agent's inputs are read as raw bytes: validation happens in :mod:`app.inputs.records`, so a bad
  record becomes a dead letter instead of a codec exception inside Faust.

Importing this module declares everything on the app; nothing else calls ``app.topic`` or
``app.Table``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, cast

import faust
from faust.types import TopicT

from app import runtime
from app.compat.table_codec import TableSchema
from app.faust_app import app, settings
from app.joins.car_state import ZoneCarsTable
from app.joins.catalog import load_all
from app.joins.fk_spec import FkJoinSpec
from app.joins.fk_state import INT_KEYS, JSON_KEYS, IndexKeys, index_table_class
from app.joins.joins_table import JoinsTable
from app.joins.resolve import refuse_without_registry
from app.joins.spec import JoinSpec, Side, SpecError
from app.state.range_scan import RangeTable, range_table

#: (name, topics, partition count) of topics that must be co-partitioned (app.kafka.copartition)
CopartitionGroup = tuple[str, tuple[str, ...], int]


class TopicArgs(TypedDict, total=False):
    """The keyword arguments of ``app.topic`` given below (names and types as Faust's)."""

    key_serializer: str
    value_serializer: str
    partitions: int


class TableArgs(TypedDict, total=False):
    """The keyword arguments of ``app.Table`` and :func:`range_table` given below."""

    partitions: int
    key_type: type
    options: dict[str, Any]  # the store's (RocksDB) options
    schema: TableSchema


_raw: TopicArgs = {
    "key_serializer": "raw",
    "value_serializer": "raw",
    "partitions": settings.partitions,
}
_out: TopicArgs = {"key_serializer": "raw", "value_serializer": "raw"}
#: every table's RocksDB memtables (the memory store ignores them); the block cache and the
#: memtables' total are one budget per worker (app.compat.rocksdb_memory,
#: docs/operating/scaling.md#memory)
_store_options: dict[str, Any] = {
    "write_buffer_size": settings.rocksdb_write_buffer_mb << 20,
    "max_write_buffer_number": 2,
}
#: tables hold plain JSON rows: decoded without Faust's registry (app.compat.table_codec), and
#: not at all on replay into RocksDB, which keeps the changelog's bytes
_decode = not settings.local_tables
_json: TableArgs = {
    "partitions": settings.partitions,
    "options": _store_options,
    "schema": TableSchema(key_serializer="json", value_serializer="json", decode=_decode),
}
# key_type=bytes too: Faust derives the changelog's key serializer from key_type alone (json
# otherwise), and recovery would then fail to decode the byte keys
_bytes_json: TableArgs = {
    "partitions": settings.partitions,
    "key_type": bytes,
    "options": _store_options,
    "schema": TableSchema(key_serializer="raw", value_serializer="json", decode=_decode),
}


def _table(name: str, args: TableArgs) -> faust.Table:
    """``app.Table(name, default=None, **args)``, typed as what it returns: Faust's signature
    says ``TableT``, but the app's ``Table`` setting is ``app.compat.stores:EtjTable``, a
    ``faust.Table`` (what the stores and the agents read it as)."""
    return cast(faust.Table, app.Table(name, default=None, **args))


# --- shared outputs ----------------------------------------------------------------------------
dead_letters = app.topic(settings.dead_letter_topic, **_out)  # original key -> record + reason
late = app.topic(settings.late_topic, **_out)  # original key -> record + horizon


# --- every join spec -----------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinTables:
    """A spec's tables (:mod:`app.joins.state`)."""

    history: faust.Table  # key -> [[event_time, *copied values], ...] sorted
    joins: JoinsTable  # J (key, event_time, jid) -> join; its I and X indexes (app.joins.keys)
    clock: faust.Table  # partition -> stream time (greatest event time seen; never decreases)


@dataclass(frozen=True)
class RepartitionHop:
    """A side with ``"repartition": true``: its records re-keyed by the join key
    (:mod:`app.agents.repartition`) through an internal topic the join reads instead."""

    spec: JoinSpec
    name: str  # "events" or "dimension"
    side: Side
    source: TopicT  # the user's topic (any key), read by the hop's agent
    target: TopicT  # <app id>-<join>-<side>-repartition: join key -> the record as it came


@dataclass(frozen=True)
class JoinTopology:
    """One join spec's topics and tables."""

    spec: JoinSpec
    inputs: TopicT  # events + dimension (or their repartition topics) + ticks, read by one agent
    ticks: TopicT  # (partition p) -> revisit p
    output: TopicT  # join id -> revision
    tables: JoinTables
    hops: tuple[RepartitionHop, ...] = ()  # its repartitioned sides
    #: (partition) -> its finality promise (app.logic.finality); None: the spec has none
    final: TopicT | None = None

    @property
    def copartition_groups(self) -> list[CopartitionGroup]:
        spec = self.spec
        return [(f"join {spec.name!r}", spec.inputs, spec.partitions or settings.partitions)]

    @property
    def produced_by_others(self) -> list[str]:
        """Inputs others produce, keyed by the key field (a repartitioned one is keyed by
        anything: its partitioner is not sampled)."""
        return [s.topic for s in (self.spec.events, self.spec.dimension) if not s.repartition]

    @property
    def internal_topics(self) -> list[TopicT]:
        link = [self.output] if self.spec.internal_output else []
        return [self.ticks, *(h.target for h in self.hops), *link]


def declare_join(spec: JoinSpec) -> JoinTopology:
    """A spec's topics and tables, with its partition count (ETJ_PARTITIONS unless it gives
    one): its ticks topic and changelogs are created with it, its inputs must have it."""
    n = spec.partitions or settings.partitions  # over the defaults' count
    raw: TopicArgs = {**_raw, "partitions": n}
    js: TableArgs = {**_json, "partitions": n}
    bj: TableArgs = {**_bytes_json, "partitions": n}
    names = spec.tables
    # range_table makes its table with table_class: a JoinsTable
    joins = cast(
        JoinsTable, range_table(app, names.joins, default=None, table_class=JoinsTable, **bj)
    )
    joins.join_name = spec.name
    if spec.hold_ms is not None:  # its held joins' index is derived on recovery too
        joins.hold_shape = (len(spec.payload_fields), len(spec.dimension.copy))
    tables = JoinTables(
        _table(names.dimension, js),
        joins,
        _table(names.clock, js),
    )
    hops = tuple(
        RepartitionHop(
            spec,
            name,
            side,
            app.topic(side.topic, allow_empty=True, **_out),
            app.topic(side.input, internal=True, **raw),
        )
        for name, side in (("events", spec.events), ("dimension", spec.dimension))
        if side.repartition
    )
    return JoinTopology(
        spec,
        app.topic(*spec.inputs, allow_empty=True, **raw),
        app.topic(spec.ticks, internal=True, **raw),
        # a link between dimensions (app.joins.dimensions) is created with the join's count
        app.topic(spec.output, internal=True, **raw)
        if spec.internal_output
        else app.topic(spec.output, **_out),
        tables,
        hops,
        app.topic(spec.final_topic, **_out) if spec.final_topic else None,
    )


def _specs() -> tuple[list[JoinSpec], list[FkJoinSpec]]:
    """Every spec this worker runs, validated together; a spec that cannot run refuses the
    start in one line (:func:`app.runtime.refuse_start`), but for ``joins validate``, which
    then loads with no join and reports it."""
    try:
        events, fks = load_all(settings)
        return refuse_without_registry(events, settings.schema_registry_url), fks
    except SpecError as exc:
        runtime.refuse_start(exc)
        return [], []


_event_specs, _fk_specs = _specs()

#: spec name -> its topics and tables, for every join this worker runs
joins: dict[str, JoinTopology] = {spec.name: declare_join(spec) for spec in _event_specs}


# --- every foreign-key join (one-to-many), the car join among them --------------------------------


@dataclass(frozen=True)
class FkJoinTopology:
    """A foreign-key join's topics and tables (their rows: :mod:`app.joins.fk_state`).

    Two agents: the left side reads the left topic and sends moves keyed by the right key; the
    right side reads the right topic, the moves and its ticks in ONE agent, co-partitioned by
    right key (same key bytes, same partition count), so a right key's version and the left
    rows pointing at it are owned and updated together. The left table and its changelog are
    partitioned with the join's count too (another count would split a left key's state)."""

    spec: FkJoinSpec
    left_input: TopicT  # left key -> left record, read by the left side
    moves: TopicT  # internal, right key -> {op: ADD|DEL, right key, left row}
    ticks: TopicT  # internal, (p) -> wake the right side's flow control up on p
    right_inputs: TopicT  # right + moves + ticks, read by the right side
    output: TopicT  # left key -> left row x right version
    left_table: faust.Table  # left key -> newest version (car-positions)
    right_table: faust.Table  # right key -> newest version (zone-pollution)
    index_table: RangeTable  # (right key, left key) -> left version, a range table (zone-cars)
    index_keys: IndexKeys

    @property
    def copartition_groups(self) -> list[CopartitionGroup]:
        spec, n = self.spec, self.spec.partitions or settings.partitions
        if spec.name == "cars":  # the names its start-up messages always had
            return [
                ("the car join's zone side", spec.right_inputs, n),
                ("the car join's car side", (spec.left.topic,), n),
            ]
        return [
            (f"join {spec.name!r} (right side)", spec.right_inputs, n),
            (f"join {spec.name!r} (left side)", (spec.left.topic,), n),
        ]

    @property
    def produced_by_others(self) -> list[str]:
        return [self.spec.left.topic, self.spec.right.topic]

    @property
    def internal_topics(self) -> list[TopicT]:
        return [self.moves, self.ticks]

    # the car join's words for the same things (its views, tests and docs)
    arrivals = property(lambda self: self.left_input)
    zone_inputs = property(lambda self: self.right_inputs)
    positions = property(lambda self: self.left_table)
    pollution = property(lambda self: self.right_table)
    zone_cars = property(lambda self: self.index_table)


def declare_fk_join(spec: FkJoinSpec) -> FkJoinTopology:
    """A foreign-key spec's topics and tables, with its partition count (ETJ_PARTITIONS unless
    it gives one). Declared only on a worker that runs the join."""
    n = spec.partitions or settings.partitions
    raw: TopicArgs = {**_raw, "partitions": n}
    js: TableArgs = {**_json, "partitions": n}
    bj: TableArgs = {**_bytes_json, "partitions": n}
    keys = INT_KEYS if spec.int_keys else JSON_KEYS
    names = spec.tables
    return FkJoinTopology(
        spec=spec,
        left_input=app.topic(spec.left.topic, allow_empty=True, **raw),
        moves=app.topic(spec.moves, internal=True, **raw),
        ticks=app.topic(spec.ticks, internal=True, **raw),
        right_inputs=app.topic(*spec.right_inputs, allow_empty=True, **raw),
        output=app.topic(spec.output, **_out),
        left_table=_table(names.left, js),
        right_table=_table(names.right, js),
        index_table=range_table(
            app, names.index, default=None, table_class=index_table_class(keys, ZoneCarsTable), **bj
        ),
        index_keys=keys,
    )


#: spec name -> its topics and tables, for every foreign-key join this worker runs
fk_joins: dict[str, FkJoinTopology] = {spec.name: declare_fk_join(spec) for spec in _fk_specs}

#: the car join's topics and tables if this worker runs it (ETJ_BUILTIN_JOINS), else None:
#: the one place that says whether it runs
cars: FkJoinTopology | None = fk_joins.get("cars")


# --- what must be co-partitioned, and what this worker owns ------------------------------------

#: every join this worker runs, each saying what it adds to the worker's lists below
running: list[JoinTopology | FkJoinTopology] = [*joins.values(), *fk_joins.values()]


def copartition_groups() -> list[CopartitionGroup]:
    """(name, topics, partition count) of each group of topics that must be co-partitioned
    (checked at start: app.kafka.copartition). Each join's own count: a spec's ``partitions``, else
    ETJ_PARTITIONS."""
    return [group for j in running for group in j.copartition_groups]


app.copartitioned = copartition_groups()
#: the topics others produce to: their partitioner is sampled at start (app.kafka.copartition);
#: a topic several joins read, once
app.produced_by_others = list(dict.fromkeys(t for j in running for t in j.produced_by_others))
#: the worker's own topics (ticks, car moves): created at start with their join's partition
#: count, before the consumer's subscription could have a broker auto-create them with its own
app.internal_topics = [t for j in running for t in j.internal_topics]


def _input_sides() -> list[Side]:
    """Every input side of every join this worker runs."""
    return [
        *(side for j in joins.values() for side in (j.spec.events, j.spec.dimension)),
        *(side for f in fk_joins.values() for side in (f.spec.left, f.spec.right)),
    ]


class _StartDeclarations(Protocol):
    """Two more of the app's attributes this module declares, read at start with ``getattr``
    (a test's app may lack them): ``EtjApp`` does not annotate them (app/faust_app.py)."""

    input_starts: dict[str, str | int]
    timestamp_topics: list[str]


#: input topic -> where a new deployment starts reading it (a spec's ``start``: "latest", or
#: epoch ms), only for a partition without a committed offset
#: (app.compat.consumer_thread.seek_to_start); a topic not listed starts at its earliest
cast(_StartDeclarations, app).input_starts = {
    side.topic: side.start for side in _input_sides() if side.start != "earliest"
}

#: input topics whose event time is their Kafka timestamp: a LogAppendTime one is named at
#: start (app.kafka.timestamps)
cast(_StartDeclarations, app).timestamp_topics = sorted(
    {side.topic for side in _input_sides() if side.from_timestamp}
)

#: every agent's ticks topic: the revisit timer sends one tick per owned partition to each
ticks_topics: list[TopicT] = [j.ticks for j in running]


def owned_partitions(topic: str) -> list[int]:
    """The partitions of ``topic`` this worker has active (per the group assignment)."""
    return sorted(tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic)

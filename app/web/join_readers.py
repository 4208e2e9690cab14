"""How to read a join, per kind: what ``GET /joins/<join>/`` and ``GET /joins/<join>/<key>/``
answer, and what ``watch --join`` follows, for every join this worker runs.

Two kinds, one shape (:class:`JoinReader`), so a view never asks which join it serves:

- **event-time** (every spec: the mood join, the movies join, a user's ``ETJ_JOINS_FILE``
  specs): its tables are keyed by the join key (the dimension's key), one ``V`` row per
  dimension version and one ``J`` row per join (:mod:`app.joins.state`). A key's answer is its
  versions and, per join in retention, the latest revision (what the output's consumer rule
  converges to);
- **foreign-key** (the car join, a user's ``"kind": "foreign-key"`` specs:
  :mod:`app.joins.fk_state`): the key is the right key (a zone), whose row and whose current
  left rows (the cars in it) live in the same partition, so one owner answers: the latest
  version and each left row's current join.

Why the join key for both: it is what a table row is keyed and partitioned by, so the owner is
one hash away (:func:`partition_of`), and a key's answer is one range read on one worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app import topology
from app.agents.event_join import JoinEngine, engines
from app.faust_app import settings
from app.joins import car_state, fk_state
from app.joins.joins_table import stored_versions
from app.joins.keys import JOIN, VERSION, join_range, key_group, split_join_key
from app.kafka.partitioner import partition_for
from app.logic.car_join import join as join_car
from app.logic.fk_join import Joined
from app.state.range_scan import scan

__all__ = ["EventTimeReader", "ForeignKeyReader", "JoinReader", "readers", "output_topics"]


def _version_fields(names: Sequence[str], version: Sequence[Any]) -> dict[str, Any]:
    """A version as a view shows it; an end (a tombstone: its time alone) with its copied
    fields null and ``"ended": true``."""
    if len(version) == 1:
        return {**dict.fromkeys(names), names[0]: version[0], "ended": True}
    return dict(zip(names, version))


class JoinReader:
    """What a view needs of one join (module doc): its description, the table whose owner
    answers for a key, how a URL's text becomes a key, and the key's current answer."""

    name: str
    kind: str
    #: the table whose changelog partition says which worker owns a key (app.web.views.owner_of)
    table: Any
    output: str
    partitions: int

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError

    def parse_key(self, text: str) -> Any:
        """The key a URL's text names (a ValueError: no record can have it, a 404)."""
        return text

    def partition_of(self, key: Any) -> int:
        """The partition a record keyed ``key`` lands in: its decimal or UTF-8 text, murmur2,
        as the producers of the inputs partition it."""
        return partition_for(str(key).encode(), self.partitions)

    def read(self, key: Any, partition: int) -> dict[str, Any] | None:
        """The key's answer from this worker's tables; None when it has no state at all."""
        raise NotImplementedError


@dataclass
class EventTimeReader(JoinReader):
    """An event-time spec's state (module doc), read from its engine's tables."""

    engine: JoinEngine
    kind = "event-time"

    def __post_init__(self) -> None:
        spec = self.engine.spec
        self.name, self.output = spec.name, spec.output
        self.table = self.engine.tables.joins
        self.partitions = spec.partitions or settings.partitions

    def describe(self) -> dict[str, Any]:
        spec = self.engine.spec
        return {
            **spec.describe(),
            "kind": self.kind,
            "key": spec.dimension.key,
            "key_url": f"/joins/{spec.name}/{{key}}/",
            "timeline": self.timeline_fields(),
        }

    def timeline_fields(self) -> dict[str, str | None]:
        """Which output fields the timeline page draws (``/timeline/?join=<name>``): a dot's
        event time (None when the spec does not copy it: no dots), its answer (the first copied
        dimension field: the band's name), what it said before, and its label."""
        spec = self.engine.spec
        events, dim = spec.events, spec.dimension.copy
        answer = dim[0] if dim else None
        # an output field: not a fed join's upstream revision number (app.joins.chains)
        label = next((f for f in spec.payload_fields if f != spec.order_field), "id")
        return {
            "time": events.time if events.time in events.copy else None,
            "answer": answer,
            "previous": None if answer is None else f"previous_{answer}",
            "label": label,
        }

    def local_keys(self, partitions: set[int]) -> set[str]:
        """Keys with rows (joins or versions) in ``partitions`` of this worker's store."""
        out = set()
        for raw in list(self.engine.tables.joins.keys()):
            if isinstance(raw, bytes) and raw[:1] in (JOIN, VERSION):
                key = key_group(raw)[5:].decode("utf-8")
                if self.partition_of(key) in partitions:
                    out.add(key)
        return out

    def joins_of(self, key: str, partition: int) -> list[tuple[str, Any]]:
        """(join id, join) of the key's joins in retention, by event time (one range read)."""
        state, joins = self.engine.state, self.engine.tables.joins
        return [
            (split_join_key(k)[2], state.load(raw))
            for k, raw in scan(joins, *join_range(key, None, None), partition)
        ]

    def latest_revisions(
        self, key: str, found: Iterable[tuple[str, Any]], partition: int = 0
    ) -> list[dict]:
        """The latest revision of each join, as the output carries it, with its lineage (a
        held join of an ``inner`` spec has none yet: it is counted, not listed)."""
        spec, engine = self.engine.spec, self.engine
        rows = []
        for jid, j in found:
            rev = spec.rules.current(jid, key, j)
            if rev is not None:
                rows.append(
                    {
                        **spec.to_wire(rev),
                        "partition": partition,
                        "source": engine.lineage(rev.source, partition),
                    }
                )
        return rows

    def read(self, key: Any, partition: int) -> dict[str, Any] | None:
        tables = self.engine.tables
        found = self.joins_of(key, partition)
        versions = stored_versions(tables.joins, tables.history, key, partition)
        if not found and versions is None:
            return None
        rows = self.latest_revisions(key, found, partition)  # by event time (the range read)
        spec = self.engine.spec
        clock = tables.clock.get(partition)
        dim_fields = ("event_time", *spec.dimension.copy)
        return {
            "versions": [_version_fields(dim_fields, v) for v in versions or []],
            "joins": rows,
            "held": len(found) - len(rows),
            "stream_time": clock,
            "retention_horizon": None if clock is None else clock - spec.retention_ms,
        }


@dataclass
class ForeignKeyReader(JoinReader):
    """A foreign-key join's state: per dimension key, its latest version (``dimension(key)``)
    and its current members (``members(key, partition)``), joined by ``joined``."""

    name: str
    output: str
    table: Any
    partitions: int
    description: dict[str, Any]
    dimension: Callable[[Any], Any]
    members: Callable[[Any, int], Iterable[Any]]
    joined: Callable[[Any, Any], dict[str, Any]]
    version_fields: Callable[[Any], dict[str, Any]]
    parse: Callable[[str], Any] = str
    kind = "foreign-key"

    def describe(self) -> dict[str, Any]:
        return {
            **self.description,
            "name": self.name,
            "kind": self.kind,
            "output": self.output,
            "key_url": f"/joins/{self.name}/{{key}}/",
        }

    def parse_key(self, text: str) -> Any:
        return self.parse(text)

    def read(self, key: Any, partition: int) -> dict[str, Any] | None:
        version = self.dimension(key)
        # list() before any await: a RocksDB iterator must not outlive this event-loop step
        found = list(self.members(key, partition))
        if version is None and not found:
            return None
        return {
            "versions": [] if version is None else [self.version_fields(version)],
            "joins": [self.joined(m, version) for m in found],
            "held": 0,
        }


def parse_id(text: str) -> int:
    """A car or zone id from a URL: decimal digits, within the ids the wire contract allows."""
    from app.inputs.records import MAX_ID

    if not text.isascii() or not text.isdigit():
        raise ValueError("ids are non-negative integers")
    value = int(text)
    if value > MAX_ID:
        raise ValueError(f"ids are at most {MAX_ID}")
    return value


def car_reader(cars: Any) -> ForeignKeyReader:
    """The car join, read by zone: a zone's reading and the cars now in it (docs/joins/car-zone.md)."""

    def reading(zone_id: int) -> Any:
        row = cars.pollution.get(zone_id)
        return None if row is None else car_state.reading_of(zone_id, row)

    return ForeignKeyReader(
        name="cars",
        output=settings.car_pollution_topic,
        table=cars.pollution,
        partitions=settings.partitions,
        description={
            "events": {
                "topic": settings.car_arrivals_topic,
                "key": "car_id",
                "foreign_key": "to_zone_id",
                "time": "event_time",
            },
            "dimension": {
                "topic": settings.zones_topic,
                "key": "zone_id",
                "time": "event_time",
                "copy": ["pollution_level"],
            },
            "key": "zone_id",
            "consumer_rule": "per car_id, the greatest "
            "(car_event_time, zone_event_time, pollution_level)",
        },
        dimension=reading,
        members=lambda zone_id, p: car_state.cars_in_zone(cars.zone_cars, zone_id, p),
        joined=lambda arrival, r: join_car(arrival, r).to_wire(),
        version_fields=lambda r: {"event_time": r.event_time, "pollution_level": r.pollution_level},
        parse=parse_id,
    )


def fk_reader(t: topology.FkJoinTopology) -> ForeignKeyReader:
    """A foreign-key spec's join (a user's), read by right key: its latest version and the
    left rows pointing at it now, each joined as the output carries it."""
    spec = t.spec

    def version(key: Any) -> Any:
        row = t.right_table.get(key)
        return None if row is None else fk_state.right_of(key, row)

    return ForeignKeyReader(
        name=spec.name,
        output=spec.output,
        table=t.right_table,
        partitions=spec.partitions or settings.partitions,
        description={**spec.describe(), "key": spec.right.key},
        dimension=version,
        members=lambda key, p: fk_state.left_rows_in(t.index_table, t.index_keys, key, p),
        joined=lambda left, right: spec.to_wire(Joined(left, right)),
        version_fields=lambda r: _version_fields(
            ("event_time", *spec.right.copy), (r.event_time, *r.values)
        ),
        parse=parse_id if spec.right_key_type is int else str,
    )


def build_readers() -> dict[str, JoinReader]:
    """Name -> reader of every join this worker runs (event-time specs, then foreign-key
    specs: the car join in its own words, :func:`car_reader`)."""
    out: dict[str, JoinReader] = {name: EventTimeReader(e) for name, e in engines.items()}
    for name, t in topology.fk_joins.items():
        out[name] = car_reader(t) if name == "cars" else fk_reader(t)
    return out


#: every join this worker runs, by name
readers: dict[str, JoinReader] = build_readers()


def output_topics() -> dict[str, str]:
    """Join name -> its output topic (``watch --join``, ``sink postgres --join``)."""
    return {name: r.output for name, r in readers.items()}

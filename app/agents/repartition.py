"""Agents: the repartition hop of a spec side with ``"repartition": true`` (any record key).

user's topic (keyed by anything, or not at all) -> one agent per repartitioned side ->
``<app id>-<join>-<side>-repartition`` (internal, the join's partition count, key = the join
key's UTF-8 bytes: the key field's text, a composite key's JSON array; partitioned by murmur2
like every etj topic) -> the join's agent
(:mod:`app.agents.event_join`), which reads it instead of the user's topic.

Why a topic and not a re-key in memory: the join's state of a key lives on the worker that
owns the key's partition; a record keyed otherwise sits in some other partition, owned by some
other worker. Kafka Streams re-keys the same way (``selectKey`` then a repartition topic).

Each record is passed on unchanged: its value, its Kafka timestamp (a ``$timestamp`` side and
the door's records-from-the-future rule read it after the hop) and its headers; only the key
changes. It is validated here with the side's own parser (:mod:`app.joins.rekey`), so a record the join would refuse
(a missing key field, a wrong type, a time without a zone) goes to the dead letters naming
the user's topic and offset, with the reason, and never reaches the join. The door of
:mod:`app.inputs.admission` is not applied here (the keys are not the join's yet): the join's
loop applies it after the hop, where the partitioner's rule holds by construction.

Durability: the hop runs the loop every agent runs (:mod:`app.loop.durable`): the source
offsets are acknowledged only once the broker has the records passed on. A crash between the
two hops sends a record again (at least once); the join answers a record it has seen with
what it answered the first time (a join id is the record's own, or derived from its copied
fields; a dimension version is keyed by its event time and values), so a copy changes no
output (docs/joins/declarative.md#any-record-key).

Order: a key's records of one source partition keep their order in the repartition topic;
records of one key from several source partitions interleave as the hop reads them, and the
join's flow control orders the two inputs of a partition by event time after the hop, as it
does for any input.
"""

from __future__ import annotations

from typing import Any

from app.faust_app import app, settings
from app.inputs.records import InvalidRecord
from app.inputs.tombstones import NOT_A_DELETE, REKEYED
from app.joins.rekey import rekeyer
from app.joins.spec import JoinSpec, Side
from app.kafka.schema_registry import shared_registry
from app.loop.dead_letters import dead_letter
from app.loop.durable import DurableLoop, agent_body
from app.loop.types import Out
from app.topology import RepartitionHop, joins

__all__ = ["RepartitionEngine", "engines"]


class RepartitionEngine:
    """One repartitioned side's hop: parse (the side's rules), re-key, pass on."""

    #: no tables: what it writes is the records it passes on
    overlays: tuple[Any, ...] = ()

    def __init__(self, hop: RepartitionHop) -> None:
        spec: JoinSpec = hop.spec
        side: Side = hop.side
        assert side.repartition is not None
        self.spec, self.side = spec, side
        self.join = spec.name  # the metrics' label: the hop is part of its join
        self.source, self.target = side.topic, side.repartition
        self.dead_letters = settings.dead_letter_topic
        #: (value, timestamp) -> (the join key's bytes, the event time): the join's own rules
        #: (a side written otherwise than JSON text: its writer schemas fetched before each
        #: batch, :meth:`prepare`)
        self.schemas = shared_registry(settings)
        self._rekey = rekeyer(side, self.schemas)
        self._framed: dict[str, tuple[str | None, str | None]] = (
            {self.source: (None, side.format)} if side.format != "json" else {}
        )
        self.loop = DurableLoop(self, (self.source,), hop=True)
        body = agent_body(self.loop)
        body.__qualname__ = body.__name__ = f"{spec.name}_{hop.name}_repartition"
        body.__module__ = __name__
        app.topics.add(hop.source)  # subscribed though the stream is never iterated
        self.agent = app.agent(hop.source, name=f"{__name__}.{spec.name}.{hop.name}")(body)

    def end_batch(self) -> None:
        """Nothing kept aside: the hop has no state."""

    async def prepare(self, batches: list[Any]) -> None:
        """Before a batch is parsed: the writer schemas of its framed values fetched."""
        if self._framed and self.schemas is not None:
            await self.schemas.prefetch_batches(self._framed, batches)

    def parse(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Any = None,
    ) -> tuple[Any, int]:
        """(the join key's bytes, the event time); raises :class:`InvalidRecord` with the
        join's reason for a record it would refuse (a tombstone: it has no value to read the
        join key from, app.inputs.tombstones)."""
        if value is None:
            raise InvalidRecord(NOT_A_DELETE if self.side is self.spec.events else REKEYED)
        return self._rekey(value, timestamp, headers)

    def pass_on(self, topic: str, record: Any, parsed: Any) -> list[Out]:
        """The record to the repartition topic, keyed by its join key, as it came."""
        if isinstance(parsed, InvalidRecord):
            return [
                dead_letter(
                    self.join,
                    self.dead_letters,
                    topic,
                    record.partition,
                    record.offset,
                    record.key,
                    record.value,
                    str(parsed),
                )
            ]
        return [
            Out(
                self.target,
                parsed,
                record.value,
                timestamp=record.timestamp,
                headers=record.headers,
            )
        ]

    def on_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        parsed: Any,
    ) -> list[Out]:
        raise NotImplementedError("a hop is handed whole records (pass_on)")

    def on_tick(self, partition: int, offset: int) -> list[Out]:
        return []


#: (join, side) -> the hop's engine, for every repartitioned side this worker runs
engines: dict[tuple[str, str], RepartitionEngine] = {
    (name, hop.name): RepartitionEngine(hop) for name, t in joins.items() for hop in t.hops
}

"""The durable loop's shared types: what an engine gives it, what a handled batch carries.

One module, importing nothing else of the loop, so that every part of the loop (and every
engine, :mod:`app.agents`) names these types without importing another part: before it,
``durable`` imported ``intake`` and ``pipeline``, which imported ``Engine`` and ``Unit`` back
from ``durable`` (under ``TYPE_CHECKING``): an import cycle. The pattern of faust's ``types/``.

- :class:`Out` — a record to send once state is durable; :class:`Source` — an input record a
  batch handled (what its dead letter carries: the consumer record itself);
- :class:`Engine` — the rules of one agent, over its tables' overlays: what a loop drives;
  :class:`Hop` — one that passes records on (a repartition hop);
- :class:`Unit` — one handled batch on its way to the broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from app.outputs.producer_batches import Sent
    from app.state.overlay import Overlay

__all__ = ["Engine", "Hop", "Out", "Source", "Unit"]


@dataclass(slots=True)
class Out:
    """A record to send once state is durable (topic by name; key and value as bytes)."""

    topic: str
    key: bytes | None
    value: bytes | None  # None: a tombstone (a foreign-key join's delete of a left key)
    #: a repeat of an output made by an earlier record (re-emitted after a crash or a
    #: rebalance): if the broker refuses it, the record that triggered the repeat is not to blame
    again: bool = False
    #: the record's timestamp (epoch ms) and headers, kept when a record is passed on as it
    #: came (a repartition hop, app.agents.repartition); None: the producer's clock, no headers
    timestamp: int | None = None
    headers: Any = None


class Source(Protocol):
    """An input record a batch handled (what its dead letter carries): the consumer record
    itself (aiokafka's ``ConsumerRecord``), kept as it came — a copy of its fields per record
    (a frozen dataclass) was 1.6 µs and one more tracked object per record (issue 47)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class Engine(Protocol):
    """What a loop drives: the rules of one agent, over its tables' overlays."""

    #: the metrics' ``join`` label
    join: str

    @property
    def overlays(self) -> Sequence[Overlay]:
        """The overlays of the tables it writes (flushed by the loop at the end of each batch;
        read only: an engine may hold them in a tuple)."""

    def end_batch(self) -> None:
        """The batch is handled: write what it kept aside for its end (before the flush)."""

    def parse(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Any = None,
    ) -> tuple[Any, int]:
        """(the record, its event time); raises :class:`InvalidRecord`. ``timestamp``: the
        record's Kafka timestamp (epoch ms), for a spec side timed by it; ``headers``: its
        Kafka headers ((name, bytes) pairs), for a spec side that reads one."""

    def on_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        parsed: Any,
    ) -> list[Out]:
        """One input record (``parsed``: the record, or the :class:`InvalidRecord`)."""

    def on_tick(self, partition: int, offset: int) -> list[Out]:
        """One tick of the agent's ticks topic."""


class Hop(Engine, Protocol):
    """An engine that passes records on to another topic (a repartition hop): handed each
    whole consumer record, since what it sends keeps the record's timestamp and headers."""

    def pass_on(self, topic: str, record: Any, parsed: Any) -> list[Out]:
        """One input record (``parsed``: what :meth:`parse` made of it, or the
        :class:`InvalidRecord`) -> what to send."""


@dataclass(slots=True)
class Unit:
    """One handled batch on its way to the broker."""

    generation: int
    outs: list[Out] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # len(outs) after each source
    #: (topic, partition) -> [first, end) of the offsets handled
    acks: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    changelog: Sent | None = None
    sent: Sent | None = None

"""What a dead-letters replay sends, without the broker: each dead letter read back as the record it
stands for, judged again by the rules the worker applies, and sent where its join reads it
(``faust -A app.main dead-letters replay``: :mod:`app.commands.dead_letters`).

A dead letter is sent back to its input topic only when its cause is gone:

- **the record**: the original, read back from its input topic at its partition and offset
  while the topic retains it (the exact key, value, timestamp and headers), else the dead
  letter's copy, if it is exact (not cut at 64 KiB, with its timestamp and headers:
  :class:`app.loop.dead_letters.DeadLetter`);
- **the rules**: the side's parser (what the join's agent, or a repartitioned side's hop, reads
  it with), then the door the worker passes it through (:func:`app.inputs.admission.check_record`:
  Kafka's partitioner, records from the future, judged now); a record that still fails is not
  sent, and is counted by rule;
- **the partition**: the one Kafka's default partitioner gives its key in the topic
  (:func:`app.kafka.partitioner.partition_for`), which the door checks: a record dead-lettered
  for its partition is fixed by exactly that. Its own partition when the worker does not check
  the partitioner (``ETJ_CHECK_PARTITIONER=false``: the topics are partitioned otherwise on
  purpose) or the record has no key, and on a repartitioned side's own topic (its hop takes any
  partition);
- **not judged again**: a dead letter the rules cannot see the cause of (an output the broker
  refused, an internal error, a join already final) is skipped unless asked for
  (``unchecked``): its cause is elsewhere;
- **by its join**: a topic several joins read is judged by the rules of the join that refused
  it (the dead letter's ``join``; one that names none, by the first join that reads it);
- **once**: a dead letter of a record this run saw already for its join (the same topic,
  partition and offset: a worker that reads a record again dead-letters it again), or sent
  already (another join's dead letter of it: every join reading the topic is handed it), is
  skipped.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.inputs.admission import check_record
from app.inputs.records import InvalidRecord
from app.inputs.tombstones import CARS_TAKE_NO_DELETES, NOT_A_DELETE, REKEYED, side_end_reader
from app.joins.fk_spec import FkJoinSpec
from app.joins.rekey import rekeyer
from app.joins.spec import JoinSpec, Side
from app.kafka.partitioner import partition_for
from app.loop.dead_letters import DeadLetter

__all__ = ["Input", "Judge", "Original", "Verdict", "inputs_of", "same_record", "schema_ids"]

#: (key, value, timestamp) -> (the record, its event time); raises InvalidRecord
Parse = Callable[[bytes | None, bytes | None, int | None], tuple[Any, int]]


@dataclass(frozen=True)
class Input:
    """An input topic a join of this worker reads, as the worker reads it."""

    join: str
    topic: str
    parse: Parse
    #: the worker passes its records through the door (Kafka's partitioner, the future); False:
    #: a repartitioned side's own topic, whose hop takes any key and partition
    door: bool = True
    #: (its keys' Schema Registry format, its values'), None where not framed: the writer
    #: schemas to fetch before a record is parsed (app.kafka.schema_registry)
    framed: tuple[str | None, str | None] = (None, None)


def _side_parse(side: Side, schemas: Any, tombstone: str | None = None) -> Parse:
    """A side's records as the worker reads them; a tombstone (null value): an end read as the
    worker reads one (``tombstone`` None: a side that takes deletes), else refused with that
    reason (app.inputs.tombstones). A tombstone an older worker dead-lettered ("empty value")
    is so sent again once its side takes deletes."""
    parse, time = side.parser(schemas), side.time
    read_end = side_end_reader(side, schemas) if tombstone is None else None

    def read(key: bytes | None, value: bytes | None, timestamp: int | None) -> tuple[Any, int]:
        if value is None:
            if read_end is None:
                raise InvalidRecord(tombstone or "")
            ended = read_end(key, timestamp)
            return ended, ended.event_time
        record = parse(key, value, timestamp)
        return record, getattr(record, time)

    return read


def _hop_parse(side: Side, schemas: Any) -> Parse:
    rekey = rekeyer(side, schemas)

    def read(key: bytes | None, value: bytes | None, timestamp: int | None) -> tuple[Any, int]:
        return rekey(value, timestamp)

    return read


def _framed(side: Side) -> tuple[str | None, str | None]:
    keys, values = side.framed
    return ("avro" if keys else None, side.format if values else None)


def inputs_of(
    joins: Iterable[JoinSpec], fk_joins: Iterable[FkJoinSpec] = (), schemas: Any = None
) -> dict[str, list[Input]]:
    """Topic -> how each join that reads it reads it (several joins may read one topic), for
    every input of these joins (a repartitioned side: its own topic, read by the hop, and its
    repartition topic, read by the join); ``schemas``: the Schema Registry's client, for a side
    written otherwise than JSON."""
    out: dict[str, list[Input]] = {}
    for spec in joins:
        for side in (spec.events, spec.dimension):
            if side.repartition:
                hop = (None, side.format if side.format != "json" else None)
                out.setdefault(side.topic, []).append(
                    Input(spec.name, side.topic, _hop_parse(side, schemas), False, hop)
                )
            tombstone = (
                NOT_A_DELETE
                if side is spec.events
                else REKEYED
                if side.repartition
                else None  # a dimension: an end
            )
            out.setdefault(side.input, []).append(
                Input(
                    spec.name,
                    side.input,
                    _side_parse(side, schemas, tombstone),
                    True,
                    _framed(side),
                )
            )
    for fk in fk_joins:
        refused = CARS_TAKE_NO_DELETES if fk.name == "cars" else None
        for side in (fk.left, fk.right):
            out.setdefault(side.topic, []).append(
                Input(fk.name, side.topic, _side_parse(side, None, refused))
            )
    return out


def schema_ids(source: Input, records: Iterable[Any]) -> list[tuple[int, str]]:
    """(schema id, format) of the framed keys and values of ``records`` (each with a
    ``key`` and a ``value``) of ``source``: what to fetch before they are parsed."""
    out = []
    for r in records:
        for data, fmt in ((r.key, source.framed[0]), (r.value, source.framed[1])):
            if fmt is not None and data is not None and len(data) >= 5 and data[0] == 0:
                out.append((int.from_bytes(data[1:5], "big"), fmt))
    return out


@dataclass(frozen=True)
class Original:
    """A record as read from its input topic (what a consumer record holds of it)."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: list[tuple[str, bytes | None]]


def same_record(letter: DeadLetter, original: Original) -> bool:
    """Is ``original`` the record ``letter`` stands for (the input topic's record at its
    position may be another one: a topic deleted and made again)? Compared as far as the
    dead letter kept it: the key as text, the value whole or by its digest."""
    key = None if original.key is None else original.key.decode("utf-8", errors="replace")
    if key != (None if letter.key is None else letter.key.decode("utf-8")):
        return False
    if letter.value_sha256 is not None:
        return hashlib.sha256(original.value or b"").hexdigest() == letter.value_sha256
    return original.value == letter.value


#: what a dead letter's error starts with when the rules cannot see its cause again
_UNCHECKED = (
    ("output refused", re.compile(r"^output refused by the broker")),
    ("internal error", re.compile(r"^internal error")),
    ("final join", re.compile(r"^join .* is final")),
)

Action = Literal["send", "fails", "skip"]


@dataclass(frozen=True)
class Verdict:
    """What a replay does with one dead letter: ``send`` it (to ``topic``'s ``partition``, as
    ``record``), or not: it still ``fails`` a rule (``reason``: the rule), or is ``skip``-ped
    (``reason``: why); ``detail``: for a person."""

    action: Action
    reason: str
    detail: str = ""
    topic: str | None = None
    partition: int | None = None
    record: Original | None = None


@dataclass
class Judge:
    """The worker's rules over dead letters, for one run (module docstring): ``inputs``
    (:func:`inputs_of`), the partition count of each input topic, the wall clock of the run
    and the worker's settings of the door."""

    inputs: Mapping[str, Sequence[Input]]
    partitions: Mapping[str, int]
    now_ms: int
    max_future_ms: int
    check_partitioner: bool = True
    #: send a dead letter whose cause the rules cannot see (an output refused, …) if it passes
    unchecked: bool = False

    def __post_init__(self) -> None:
        #: (join, topic, partition, offset) of the dead letters judged
        self.seen: set[tuple[str | None, str, int, int]] = set()
        #: (topic, partition, offset) of the records to send
        self.sent: set[tuple[str, int, int]] = set()

    def source(self, letter: DeadLetter) -> Input | None:
        """How the join that refused ``letter`` reads its topic: the dead letter's ``join``
        (one that names none, or a join these settings do not run: the first join that reads
        it); None: no join of this worker's reads it."""
        readers = self.inputs.get(letter.topic, ())
        for r in readers:
            if r.join == letter.join:
                return r
        return readers[0] if readers else None

    def join_of(self, letter: DeadLetter) -> str | None:
        """The join whose input the dead letter's topic is (None: no join of this worker's)."""
        found = self.source(letter)
        return None if found is None else found.join

    def schema_ids(self, letter: DeadLetter, original: Original | None) -> list[tuple[int, str]]:
        """The writer schemas to fetch before ``letter`` is judged (:func:`schema_ids`)."""
        found = self.source(letter)
        if found is None:
            return []
        return schema_ids(found, [letter] if original is None else [letter, original])

    def __call__(self, letter: DeadLetter, original: Original | None) -> Verdict:
        """``original``: the record at the dead letter's position in its input topic (None:
        no longer retained, or not read)."""
        where = f"{letter.topic}[{letter.partition}]@{letter.offset}"
        position = (letter.topic, letter.partition, letter.offset)
        if (letter.join, *position) in self.seen:
            return Verdict("skip", "duplicate", f"{where}: dead-lettered more than once")
        self.seen.add((letter.join, *position))
        if position in self.sent:
            return Verdict(
                "skip", "duplicate", f"{where}: sent already (another join's dead letter of it)"
            )
        source = self.source(letter)
        if source is None:
            return Verdict(
                "skip",
                "not an input",
                f"{where}: no join of these settings reads it as an input (an internal "
                "topic, or another deployment's)",
            )
        count = self.partitions.get(letter.topic)
        if not count:
            return Verdict("skip", "no such topic", f"{where}: the topic is gone")
        if not self.unchecked:
            for kind, pattern in _UNCHECKED:
                if pattern.match(letter.error):
                    return Verdict("skip", kind, f"{where}: {letter.error}")
        if original is not None and same_record(letter, original):
            record, copy = original, "the input topic"
        elif letter.exact:
            record = Original(letter.key, letter.value, letter.timestamp, letter.headers or [])
            copy = "the dead letter's copy"
        else:
            return Verdict(
                "skip",
                "original gone",
                f"{where}: its input topic no longer holds it, and its dead letter is no "
                f"exact copy: {letter.inexact}",
            )
        try:
            _, event_time = source.parse(record.key, record.value, record.timestamp)
        except InvalidRecord as exc:
            return Verdict("fails", "invalid", f"{where}: {exc}")
        partition = letter.partition
        if source.door and self.check_partitioner and record.key is not None:
            partition = partition_for(record.key, count)
        if source.door:
            refused = check_record(
                _AtPartition(record.key, partition, record.timestamp),
                event_time,
                count,
                self.now_ms,
                self.max_future_ms,
                self.check_partitioner,
            )
            if refused is not None:
                rule, reason = refused
                return Verdict("fails", rule, f"{where}: {reason}")
        moved = "" if partition == letter.partition else f" (was partition {letter.partition})"
        self.sent.add(position)
        return Verdict(
            "send",
            "sent",
            f"{where} -> partition {partition}{moved}, from {copy}",
            letter.topic,
            partition,
            record,
        )


@dataclass(frozen=True)
class _AtPartition:
    """A record as the door sees it (key, partition, timestamp)."""

    key: bytes | None
    partition: int
    timestamp: int | None

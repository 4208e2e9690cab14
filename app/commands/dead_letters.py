"""``faust -A app.main dead-letters replay [--join NAME] [--since T] [--dry-run] [--unchecked]``:
send the dead letters whose cause is gone back to their input topic.

Once the cause of a burst of dead letters is fixed (a producer's partitioner, a schema, the
spec's fields), this is the way back for the records it refused: the dead-letter topic
(``ETJ_DEAD_LETTER_TOPIC``) is read from ``--since`` (the time a dead letter was written:
ISO-8601 with a zone, or epoch ms) to its end as the run starts; each dead letter is judged
again by the rules the worker applies (:mod:`app.commands.replay`: the original record read
back from its input topic while it is retained, else the dead letter's exact copy; the side's
parser; the door) and only the ones that pass are sent: to the partition Kafka's default
partitioner gives their key, with their original key, value, timestamp and headers. One
summary says how many it sent, how many still fail (by rule) and how many it skipped (by
reason), and the ``--since`` of a next run that repeats none of them. ``--dry-run`` sends
nothing and prints the same summary.

Run it with the workers' settings (``ETJ_JOINS_FILE``, ``ETJ_BUILTIN_JOINS``, the topics): a
topic is judged by the join that reads it. A record sent twice (two runs over the same dead
letters) is a duplicate to its join, which changes nothing while the join is within its
retention (docs/concepts/guarantees.md#guaranteed); a record older than its join's horizon
by then goes to the late topic (docs/operating/runbook.md#replay-dead-letters).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import click
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from faust.cli import argument, option

from app.commands.replay import Judge, Original, Verdict, inputs_of
from app.faust_app import app, settings
from app.inputs.records import InvalidRecord
from app.inputs.time_formats import iso_to_ms
from app.kafka.connection import bootstrap_servers
from app.kafka.schema_registry import shared_registry
from app.kafka.security import aiokafka_auth
from app.loop.dead_letters import DeadLetter, read_dead_letter
from app.topology import fk_joins, joins

__all__ = ["Summary", "dead_letters", "parse_since", "replay"]


def parse_since(text: str | None) -> int | None:
    """``--since``: epoch ms, or an ISO-8601 time with a zone."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        return iso_to_ms(text)
    except InvalidRecord as exc:
        raise click.BadParameter(f"{exc} (give epoch ms or an ISO-8601 time with a zone)") from None


@dataclass
class Summary:
    """What a run did: the dead letters it read, its verdicts in order, the latest dead
    letter's time (for the next run's ``--since``)."""

    topic: str
    dry_run: bool
    read: int = 0
    verdicts: list[Verdict] = field(default_factory=list)
    last_written: int | None = None

    def counts(self, action: str) -> Counter[str]:
        return Counter(v.reason for v in self.verdicts if v.action == action)

    def lines(self) -> list[str]:
        sent = sum(self.counts("send").values())
        fails, skipped = self.counts("fails"), self.counts("skip")

        def by(c: Counter[str]) -> str:
            return ": " + ", ".join(f"{k} {n}" for k, n in sorted(c.items())) if c else ""

        out = [
            f"dead letters replay from {self.topic}"
            + (" (dry run: nothing is sent)" if self.dry_run else ""),
            f"read {self.read}",
            f"{'would send' if self.dry_run else 'sent'} {sent}",
            f"still failing {sum(fails.values())}{by(fails)}",
            f"skipped {sum(skipped.values())}{by(skipped)}",
        ]
        word = {"send": "would send" if self.dry_run else "sent", "fails": "still fails"}
        for v in self.verdicts:
            tag = "" if v.action == "send" else f" [{v.reason}]"
            out.append(f"  {word.get(v.action, 'skipped')}{tag}: {v.detail}")
        if self.last_written is not None:
            out.append(
                f"next run, to repeat none of these: --since {self.last_written + 1} "
                "(the dead letters written after the last one read)"
            )
        return out


async def _dead_letters(
    consumer: AIOKafkaConsumer, topic: str, since: int | None
) -> list[tuple[int, Any]]:
    """(the time it was written, the consumer record) of each dead letter written at or after
    ``since``, up to the end of each partition as the run starts."""
    parts = sorted(consumer.partitions_for_topic(topic) or ())
    tps = [TopicPartition(topic, p) for p in parts]
    if not tps:
        return []
    consumer.assign(tps)
    end = await consumer.end_offsets(tps)
    start = await consumer.beginning_offsets(tps)
    if since is not None:  # a hint only (a broker may answer 0): each record is checked below
        try:  # tp -> the first offset written at or after it (None: none)
            found = await consumer.offsets_for_times(dict.fromkeys(tps, since))
        except Exception:  # not answered: read from the start, the filter below decides
            found = {}
        for tp in found:
            at = found[tp]
            start[tp] = end[tp] if at is None else max(start[tp], at.offset)
    out: list[tuple[int, Any]] = []
    todo = {tp for tp in tps if start[tp] < end[tp]}
    for tp in todo:
        consumer.seek(tp, start[tp])
    while todo:
        got = await consumer.getmany(*todo, timeout_ms=1000)
        for tp, records in got.items():
            out += [(r.timestamp, r) for r in records if r.offset < end[tp]]
        todo = {tp for tp in todo if await consumer.position(tp) < end[tp]}
    return [(t, r) for t, r in out if since is None or t >= since]


async def _original(
    consumer: AIOKafkaConsumer,
    letter: DeadLetter,
    partitions: int,
    bounds: dict[TopicPartition, tuple[int, int]],
) -> Original | None:
    """The record at the dead letter's position in its input topic of ``partitions``
    partitions (None: gone, or another offset there: compacted); ``bounds``: each input
    partition's first and end offsets, read once per run."""
    tp = TopicPartition(letter.topic, letter.partition)
    if not 0 <= letter.partition < partitions:
        return None
    consumer.assign([tp])
    if tp not in bounds:
        first = (await consumer.beginning_offsets([tp]))[tp]
        bounds[tp] = (first, (await consumer.end_offsets([tp]))[tp])
    first, end = bounds[tp]
    if not first <= letter.offset < end:
        return None
    consumer.seek(tp, letter.offset)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for r in (await consumer.getmany(tp, timeout_ms=500, max_records=1)).get(tp, []):
            if r.offset != letter.offset:
                return None
            return Original(r.key, r.value, r.timestamp, list(r.headers or ()))
    return None


async def replay(
    join: str | None, since: int | None, dry_run: bool, unchecked: bool = False
) -> Summary:
    """Judge the dead letters (module docstring) and send those that pass, unless
    ``dry_run``; what it did."""
    topic = settings.dead_letter_topic
    summary = Summary(topic, dry_run)
    schemas = shared_registry(settings)
    inputs = inputs_of(
        (t.spec for t in joins.values()), (f.spec for f in fk_joins.values()), schemas
    )  # the joins this worker's settings run
    runs = {i.join for readers in inputs.values() for i in readers}
    if join is not None and join not in runs:
        names = ", ".join(sorted(runs))
        raise click.BadParameter(f"no join {join!r}; these settings run: {names}")
    auth = aiokafka_auth(settings)
    servers = bootstrap_servers(settings.broker_url)
    consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, **auth)
    await consumer.start()
    try:
        existing = await consumer.topics()
        if topic not in existing:
            return summary
        # read before any assignment: the client's metadata then holds the assigned topics only
        counts = {t: len(consumer.partitions_for_topic(t) or ()) for t in existing}
        written = await _dead_letters(consumer, topic, since)
        summary.read = len(written)
        if written:
            summary.last_written = max(t for t, _ in written)
        judge = Judge(
            inputs,
            {t: counts[t] for t in inputs if counts.get(t)},
            int(time.time() * 1000),
            settings.max_future_ms,
            settings.check_partitioner,
            unchecked,
        )
        letters: list[DeadLetter] = []
        for _, r in written:
            try:
                letters.append(read_dead_letter(r.value))
            except ValueError as exc:
                where = f"{topic}[{r.partition}]@{r.offset}"
                summary.verdicts.append(Verdict("skip", "not a dead letter", f"{where}: {exc}"))
        letters.sort(key=lambda d: (d.topic, d.partition, d.offset))
        bounds: dict[TopicPartition, tuple[int, int]] = {}
        for letter in letters:
            if join is not None and judge.join_of(letter) != join:
                summary.verdicts.append(Verdict("skip", "another join", f"{letter.topic}"))
                continue
            n = counts.get(letter.topic, 0)
            original = await _original(consumer, letter, n, bounds) if n else None
            ids = judge.schema_ids(letter, original)
            if ids and schemas is not None:  # a side written otherwise than JSON text
                await schemas.prefetch(ids)
            summary.verdicts.append(judge(letter, original))
    finally:
        await consumer.stop()
    sends = [v for v in summary.verdicts if v.action == "send"]
    if sends and not dry_run:
        await _send(servers, auth, sends)
    return summary


async def _send(servers: str, auth: dict[str, Any], sends: list[Verdict]) -> None:
    """Each record to its input topic's partition, with its original key, value, timestamp
    and headers; every send acknowledged by the broker (acks=all) before the run ends."""
    producer = AIOKafkaProducer(bootstrap_servers=servers, acks="all", **auth)
    await producer.start()
    try:
        futures = []
        for v in sends:
            record = v.record
            assert record is not None and v.topic and v.partition is not None  # a send's
            futures.append(
                await producer.send(
                    v.topic,
                    record.value,
                    key=record.key,
                    partition=v.partition,
                    timestamp_ms=record.timestamp,
                    headers=record.headers or None,
                )
            )
        for fut in futures:
            await fut
    finally:
        await producer.stop()


@app.command(
    argument("action", type=click.Choice(["replay"])),
    option("--join", "join", default=None, help="Only the dead letters of this join's inputs."),
    option(
        "--since",
        default=None,
        help="Only the dead letters written at or after this time (epoch ms, or ISO-8601 "
        "with a zone).",
    ),
    option("--dry-run", is_flag=True, default=False, help="Send nothing; print the summary."),
    option(
        "--unchecked",
        is_flag=True,
        default=False,
        help="Also send the dead letters whose cause the rules cannot see (an output the "
        "broker refused, an internal error, a final join) once they pass the rules.",
    ),
)
async def dead_letters(
    self: object, action: str, join: str | None, since: str | None, dry_run: bool, unchecked: bool
) -> None:
    """Send the dead letters whose cause is gone back to their input topic (ACTION: replay)."""
    summary = await replay(join, parse_since(since), dry_run, unchecked)
    for line in summary.lines():
        print(line, flush=True)

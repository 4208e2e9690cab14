"""Agents: every foreign-key join, a one-to-many join (docs/joins/declarative.md#foreign-key-joins;
the built-in car join is one: docs/joins/car-zone.md).

left topic (key left key) -> the left side -> left table -> moves
    (internal, key right key: DEL old right key, ADD new right key)
right topic + moves + ticks (key right key, co-partitioned) -> the right side -> tables
    right, index ((right key, left key) keys) -> output (key left key)

The right side reads its inputs in ONE agent, so per worker one sequential loop owns a right
key's version and the left rows pointing at it. A right record finds those rows by a range scan
over the index store (:mod:`app.state.range_scan`): its cost depends on their number, not on the
table's.

The rules live in :mod:`app.logic.fk_join`, the tables' keys and rows in
:mod:`app.joins.fk_state`; this module loads/stores state through it and returns what the rules
emit. Both agents run the durability protocol of every agent (:mod:`app.loop.durable`):
per batch, the changelog is flushed, then the outputs are sent, then the records acked; a crash
in between loses outputs whose input is then re-consumed, and the rules answer a re-delivered
record (equal to the stored one) with its outputs again, and the agents write its row again:
after a kill -9 a worker that kept its RocksDB holds rows whose changelog rows were lost with
the process, and the next owner of the partition, which recovers from the changelog, would lack
them (a DEL whose tombstone was lost: the row would stay under the right key it left). The right
side's two inputs pass the same event-time flow control as a join's (under a backlog, right
records and moves of a partition are handled in event-time order); its ticks topic only wakes
that flow control up.

Outputs of one left key come from different right partitions (DEL and ADD race), so they can
reach the output in any order: a consumer keeps the greatest per left key by
:func:`app.logic.fk_join.output_order` (the left version's event time first), see
docs/joins/car-zone.md#the-consumer-rule-keep-the-newest-output-per-car.

A tombstone (null value) on the left or right topic is a delete (app.inputs.tombstones, the
rules in :mod:`app.logic.fk_join`): a right key's end re-joins its left rows as null; a left
key's end moves its row out (``DEL``) and sends a tombstone for the key on the output, with the
end's time in header ``etj-deleted-at`` (the consumer rule orders it). Not on the built-in car
join: its consumer rule (docs/joins/car-zone.md) has no delete, so they stay dead letters.

Nothing is "too late" here (no etj-late records): the join keeps *current* state per key, never
purged by event time, so a record of any age is compared with that state and either wins (it is
the newest) or changes nothing. Malformed records -> dead letters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from app import metrics
from app.faust_app import app, settings
from app.inputs.records import InvalidRecord
from app.inputs.tombstones import CARS_TAKE_NO_DELETES, End, side_end_reader
from app.joins.fk_state import IndexRows, LeftRows, RightRows
from app.logic.fk_join import (
    DELETED_AT,
    Joined,
    Left,
    Move,
    Right,
    apply_add,
    apply_del,
    apply_left,
    apply_right,
    left_deleted,
)
from app.loop.dead_letters import dead_letter
from app.loop.durable import DurableLoop, agent_body
from app.loop.types import Out
from app.state.overlay import Overlay
from app.state.store_io import StoreIO
from app.topology import FkJoinTopology, fk_joins

__all__ = ["DELETED_AT", "FkJoin", "LeftSide", "RightSide", "engines"]


class _Counts:
    """Moves by op and outputs by cause of the batch being handled, to counters once per batch
    (not under a lock per record). Only the car join has counters (``etj_car_moves``,
    ``etj_car_pollution``)."""

    def __init__(self, name: str) -> None:
        self.counters: dict[str, Any] = {}
        if name == "cars":
            self.counters = {
                **{op: metrics.car_moves.labels(op) for op in ("ADD", "DEL")},
                "right-update": metrics.car_outputs.labels("zone-update"),
                "left-move": metrics.car_outputs.labels("car-move"),
            }
        self.batch: dict[str, int] = {}

    def count(self, what: str) -> None:
        self.batch[what] = self.batch.get(what, 0) + 1

    def flush(self) -> None:
        for what, n in self.batch.items():
            counter = self.counters.get(what)
            if counter is not None:
                counter.inc(n)
        self.batch.clear()


class FkJoin:
    """What both sides of one foreign-key join share: its spec, parsers, outputs."""

    def __init__(self, topology: FkJoinTopology) -> None:
        self.topology = topology
        self.spec = spec = topology.spec
        self.join = spec.name
        self.counts = _Counts(spec.name)
        self._parsers: dict[str, Callable[..., Any]] = {
            spec.left.topic: spec.left.parser(),
            spec.right.topic: spec.right.parser(),
        }
        self._times = {spec.left.topic: spec.left.time, spec.right.topic: spec.right.time}
        #: a tombstone's key and time (app.inputs.tombstones), per side's topic; the key as
        #: the side's key type (an int key's text back to an int)
        self._ends = {
            side.topic: (
                side_end_reader(side),
                int if side.key_kinds[0] == "int" else str,
            )
            for side in (spec.left, spec.right)
        }
        self.tombstones = {
            side.topic: metrics.tombstones.labels(spec.name, side.topic)
            for side in (spec.left, spec.right)
        }

    def parse(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Any = None,
    ) -> tuple[Any, int]:
        """(the validated record, its event time); raises :class:`InvalidRecord`."""
        if topic == self.spec.moves:
            move = self.spec.move_of(_json(value))
            return move, move.left.event_time
        if value is None:
            if self.join == "cars":
                raise InvalidRecord(CARS_TAKE_NO_DELETES)
            ended = self._ends[topic][0](key, timestamp)
            return ended, ended.event_time
        rec = self._parsers[topic](key, value, timestamp, headers)
        return rec, getattr(rec, self._times[topic])

    def dead(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        error: InvalidRecord,
    ) -> list[Out]:
        return [
            dead_letter(
                self.join,
                settings.dead_letter_topic,
                topic,
                partition,
                offset,
                key,
                value,
                str(error),
            )
        ]

    def move_out(self, move: Move) -> Out:
        self.counts.count(move.op)
        return Out(
            self.spec.moves, str(move.fk).encode(), orjson.dumps(self.spec.move_to_wire(move))
        )

    def end_key(self, topic: str, end: End) -> Any:
        """A tombstone's key as its side's key type (counted: it is applied now)."""
        self.tombstones[topic].inc()
        return self._ends[topic][1](end.key)

    def deleted_out(self, left: Left) -> Out:
        """A left key's delete on the output: a tombstone, the end's time in a header."""
        return Out(
            self.spec.output,
            str(left.key).encode(),
            None,
            headers=[(DELETED_AT, str(left.event_time).encode())],
        )

    def output_out(self, out: Joined, cause: str) -> Out:
        self.counts.count(cause)
        return Out(
            self.spec.output, str(out.left.key).encode(), orjson.dumps(self.spec.to_wire(out))
        )


def _json(value: bytes | None) -> Any:
    try:
        return orjson.loads(value or b"")
    except orjson.JSONDecodeError as exc:
        raise InvalidRecord(f"not JSON: {exc}") from None


class LeftSide:
    """left topic -> left table -> moves (DEL old right key, ADD new right key)."""

    def __init__(self, join: FkJoin) -> None:
        self.shared = join
        self.join = join.join
        self.positions = LeftRows(Overlay(StoreIO(join.topology.left_table)))
        self.overlays = (self.positions.rows,)
        self.parse = join.parse
        self._left_of = join.spec.left_of

    def on_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        rec: Any,
    ) -> list[Out]:
        if isinstance(rec, InvalidRecord):
            return self.shared.dead(topic, partition, offset, key, value, rec)
        if type(rec) is End:  # a delete (module docstring)
            left = Left.end(self.shared.end_key(topic, rec), rec.event_time)
        else:
            left = self._left_of(rec)
        position = self.positions.get(partition, left.key)
        new, moves = apply_left(position, left)
        if new is not None:
            self.positions.put(partition, new)
        elif position is not None and position.left == left:  # re-delivered: its row again
            self.positions.put(partition, position)  # (module docstring)
        outs = [self.shared.move_out(m) for m in moves]
        if left_deleted(position, new, left):
            outs.append(self.shared.deleted_out(left))
        return outs

    def on_tick(self, partition: int, offset: int) -> list[Out]:
        return []

    def end_batch(self) -> None:
        self.shared.counts.flush()


class RightSide:
    """right topic + moves (+ ticks) -> right, index tables -> output."""

    def __init__(self, join: FkJoin) -> None:
        self.shared = join
        self.join = join.join
        t = join.topology
        self.rights = RightRows(Overlay(StoreIO(t.right_table)))
        self.index = IndexRows(Overlay(StoreIO(t.index_table)), t.index_keys)
        self.overlays = (self.rights.rows, self.index.rows)
        self.parse = join.parse
        self._right_topic = join.spec.right.topic
        self._right_of = join.spec.right_of

    def on_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        rec: Any,
    ) -> list[Out]:
        if isinstance(rec, InvalidRecord):
            return self.shared.dead(topic, partition, offset, key, value, rec)
        if topic == self._right_topic:
            if type(rec) is End:  # a delete: the key's end (module docstring)
                rec = Right.end(self.shared.end_key(topic, rec), rec.event_time)
            return self.on_right(rec, partition)
        return self.on_move(rec, partition)

    def on_tick(self, partition: int, offset: int) -> list[Out]:
        return []  # the ticks topic is only read (revisit ticks: nothing to revisit here)

    def end_batch(self) -> None:
        self.shared.counts.flush()

    def on_right(self, rec: Any, partition: int) -> list[Out]:
        """A right record (or end): if newest, store it and re-join every left row pointing at
        it."""
        right = rec if type(rec) is Right else self._right_of(rec)
        stored = self.rights.get(partition, right.key)
        store, outputs = apply_right(stored, right, self.index.pointing_at(partition, right.key))
        if store:
            self.rights.put(partition, right)
        elif stored == right:  # re-delivered: its row again (module docstring)
            self.rights.put(partition, stored)
        return [self.shared.output_out(o, "right-update") for o in outputs]

    def on_move(self, move: Move, partition: int) -> list[Out]:
        """ADD: store the left row under (fk, key) and join it; DEL: remove that key."""
        left = move.left
        stored = self.index.get(partition, move.fk, left.key)
        if move.op == "DEL":
            if apply_del(stored, move) or stored is None:  # deleted, or its tombstone again
                self.index.delete(partition, move.fk, left.key)
            return []
        store, output = apply_add(stored, move, self.rights.get(partition, move.fk))
        if store:
            self.index.put(partition, move.fk, left)
        elif stored == left:  # re-delivered: its row again (module docstring)
            self.index.put(partition, move.fk, stored)
        return [] if output is None else [self.shared.output_out(output, "left-move")]


class FkAgents:
    """One foreign-key join's two agents and their loops."""

    def __init__(self, topology: FkJoinTopology) -> None:
        spec = topology.spec
        shared = FkJoin(topology)
        self.left_side, self.right_side = LeftSide(shared), RightSide(shared)
        self.left_loop = DurableLoop(self.left_side, (spec.left.topic,))
        #: flow control: right records, then moves (ties go to the right record)
        self.right_loop = DurableLoop(
            self.right_side,
            spec.right_inputs,
            merged=(spec.right.topic, spec.moves),
            ticks=spec.ticks,
        )
        app.topics.add(topology.left_input)  # subscribed though the stream is never iterated
        app.topics.add(topology.right_inputs)
        names = (
            ("track_cars", "join_zone_pollution")
            if spec.name == "cars"
            else (f"{spec.name}_left", f"{spec.name}_right")
        )
        module = "app.agents.car_join" if spec.name == "cars" else __name__
        self.left_agent = app.agent(topology.left_input, name=f"{module}.{names[0]}")(
            _named(agent_body(self.left_loop), names[0])
        )
        self.right_agent = app.agent(topology.right_inputs, name=f"{module}.{names[1]}")(
            _named(agent_body(self.right_loop), names[1])
        )


def _named(body: Any, name: str) -> Any:
    body.__qualname__ = body.__name__ = name
    body.__module__ = __name__
    return body


#: spec name -> its agents, for every foreign-key join this worker runs
engines: dict[str, FkAgents] = {name: FkAgents(t) for name, t in fk_joins.items()}

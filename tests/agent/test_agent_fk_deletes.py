"""Tombstones through a foreign-key join's two agents (no broker), a spec of the user's kind
(orders x customers' regions, declared here as a worker declares one from its joins file): a
right key's tombstone re-joins its left rows as null, a left key's moves its row out and sends
a tombstone for the key on the output; the built-in car join dead-letters them.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from app.agents.fk_join import DELETED_AT, FkAgents, engines
from app.faust_app import settings
from app.joins.fk_spec import resolve_fk
from app.topology import declare_fk_join
from tests.agent.conftest import captured, deliver, outputs
from tests.unit.test_fk_spec import orders

T = 1_790_000_000_000

#: the spec, declared in the test that needs it (once per process), as the worker declares a
#: joins file's spec at import: collecting this module declares nothing
_SPEC = resolve_fk(
    orders(name="orders-del", output="t-od-out", moves="t-od-moves", ticks="t-od-ticks")
    | {
        "left": orders()["left"] | {"topic": "t-od-orders"},
        "right": orders()["right"] | {"topic": "t-od-customers"},
    },
    0,
)


@functools.cache
def _agents() -> FkAgents:
    return FkAgents(declare_fk_join(_SPEC))


def order(oid: str, customer: str, amount: float, t: int) -> dict[str, Any]:
    return {"order_id": oid, "customer": {"id": customer}, "amount": amount, "at": _iso(t)}


def _iso(t: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t / 1000, UTC).isoformat(timespec="milliseconds")


async def _forward(sent: Any, done: int) -> int:
    """Hand the moves sent since ``done`` to the right side, in order."""
    moves = [(k, v) for t, k, v in sent if t == _SPEC.moves]
    for key, value in moves[done:]:
        await deliver(_agents().right_loop, _SPEC.moves, key, value)
    return len(moves)


async def test_a_right_tombstone_rejoins_as_null_a_left_one_deletes_the_key():
    with captured() as sent:
        left, right = _agents().left_loop, _agents().right_loop
        # 1. customer c1 is in eu; order o1 points at it
        await deliver(
            right, "t-od-customers", "c1", {"customer_id": "c1", "region": "eu"}, timestamp=T
        )
        await deliver(left, "t-od-orders", "o1", order("o1", "c1", 5.0, T + 10))
        done = await _forward(sent, 0)
        [first] = outputs(sent, _SPEC.output)
        assert (first["region"], first["region_time"]) == ("eu", T)
        # 2. a tombstone for c1 at T + 20: o1 re-joins as null, the end's time as region_time
        await deliver(right, "t-od-customers", "c1", None, timestamp=T + 20)
        [ended] = outputs(sent, _SPEC.output)[1:]
        assert (ended["order_id"], ended["region"], ended["region_time"]) == ("o1", None, T + 20)
        # 3. a tombstone for o1 at T + 30: its row leaves c1 (a DEL), the key is deleted on
        #    the output with the end's time in a header
        await deliver(left, "t-od-orders", "o1", None, timestamp=T + 30)
        moves = [json.loads(v) for t, _, v in sent if t == _SPEC.moves][done:]
        assert [(m["op"], m["customer_id"], m["order_id"]) for m in moves] == [("DEL", "c1", "o1")]
        assert outputs(sent, _SPEC.output)[-1] is None
        assert (_SPEC.output, b"o1", [(DELETED_AT, str(T + 30).encode())]) in sent.headers
        await _forward(sent, done)
        assert list(_agents().right_side.index.pointing_at(0, "c1")) == []
        # 4. a new customer version re-joins nobody: the row is gone
        n = len(outputs(sent, _SPEC.output))
        await deliver(
            right, "t-od-customers", "c1", {"customer_id": "c1", "region": "us"}, timestamp=T + 40
        )
        assert len(outputs(sent, _SPEC.output)) == n
        # 5. a tombstone on the moves topic (internal) is not a delete: a dead letter
        await deliver(right, _SPEC.moves, "c1", None, timestamp=T + 50)
        [dead] = outputs(sent, settings.dead_letter_topic)
        assert dead["topic"] == _SPEC.moves


async def test_the_car_join_dead_letters_a_tombstone():
    cars = engines["cars"]
    with captured() as sent:
        await deliver(cars.right_loop, settings.zones_topic, "3", None, timestamp=T)
        [dead] = outputs(sent, settings.dead_letter_topic)
        assert "car join" in dead["error"] and "deletes nothing" in dead["error"]

"""The scenario of tests/agent/test_agent_fk_deletes.py, run in a process of its own whose
``ETJ_JOINS_FILE`` declares the spec (``python -m tests.agent.fk_deletes_scenario``), as a
worker declares a joins file's spec at import: declared in the test process, its agents, loops
and tables would be every later test's too. Exits non-zero on a failed check.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from app.agents.fk_join import DELETED_AT, engines
from app.faust_app import settings
from tests.agent.conftest import captured, deliver, outputs

T = 1_790_000_000_000
#: the spec (tests/unit/test_fk_spec.py's orders on topics of their own), for the joins file
SPEC_NAME = "orders-del"


def order(oid: str, customer: str, amount: float, t: int) -> dict[str, Any]:
    at = datetime.fromtimestamp(t / 1000, UTC).isoformat(timespec="milliseconds")
    return {"order_id": oid, "customer": {"id": customer}, "amount": amount, "at": at}


async def forward(agents: Any, sent: Any, done: int) -> int:
    """Hand the moves sent since ``done`` to the right side, in order."""
    spec = agents.left_side.shared.spec
    moves = [(k, v) for t, k, v in sent if t == spec.moves]
    for key, value in moves[done:]:
        await deliver(agents.right_loop, spec.moves, key, value)
    return len(moves)


async def main() -> None:
    agents = engines[SPEC_NAME]  # declared from ETJ_JOINS_FILE (module docstring)
    spec = agents.left_side.shared.spec
    left, right = agents.left_loop, agents.right_loop
    customers, orders = spec.right.topic, spec.left.topic
    with captured() as sent:
        # 1. customer c1 is in eu; order o1 points at it
        await deliver(right, customers, "c1", {"customer_id": "c1", "region": "eu"}, timestamp=T)
        await deliver(left, orders, "o1", order("o1", "c1", 5.0, T + 10))
        done = await forward(agents, sent, 0)
        [first] = outputs(sent, spec.output)
        assert (first["region"], first["region_time"]) == ("eu", T), first
        # 2. a tombstone for c1 at T + 20: o1 re-joins as null, the end's time as region_time
        await deliver(right, customers, "c1", None, timestamp=T + 20)
        [ended] = outputs(sent, spec.output)[1:]
        assert (ended["order_id"], ended["region"], ended["region_time"]) == ("o1", None, T + 20)
        # 3. a tombstone for o1 at T + 30: its row leaves c1 (a DEL), the key is deleted on
        #    the output with the end's time in a header
        await deliver(left, orders, "o1", None, timestamp=T + 30)
        moves = [json.loads(v) for t, _, v in sent if t == spec.moves][done:]
        assert [(m["op"], m["customer_id"], m["order_id"]) for m in moves] == [
            ("DEL", "c1", "o1")
        ], moves
        assert outputs(sent, spec.output)[-1] is None
        assert (spec.output, b"o1", [(DELETED_AT, str(T + 30).encode())]) in sent.headers
        await forward(agents, sent, done)
        assert list(agents.right_side.index.pointing_at(0, "c1")) == []
        # 4. a new customer version re-joins nobody: the row is gone
        n = len(outputs(sent, spec.output))
        await deliver(
            right, customers, "c1", {"customer_id": "c1", "region": "us"}, timestamp=T + 40
        )
        assert len(outputs(sent, spec.output)) == n
        # 5. a tombstone on the moves topic (internal) is not a delete: a dead letter
        await deliver(right, spec.moves, "c1", None, timestamp=T + 50)
        [dead] = outputs(sent, settings.dead_letter_topic)
        assert dead["topic"] == spec.moves, dead


if __name__ == "__main__":
    asyncio.run(main())
    print("ok")

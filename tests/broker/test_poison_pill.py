"""A poison pill: an output the broker refuses for good sends its input to the dead letters,
and the worker goes on (app.loop.durable, app.outputs.delivery).

Which refusal: the PRODUCER's. The bundled broker (tansu) ignores a topic's
``max.message.bytes`` (checked: a 5,000-byte record goes into a topic created with 1,000), so
the worker runs with ``ETJ_PRODUCER_MAX_REQUEST_BYTES`` and aiokafka's ``send`` refuses the
oversize output itself (``MessageSizeTooLargeError``). A broker's refusal on the future takes
the same path in the loop (tests/agent/test_poison_pill.py simulates it).

The oversize output must come with changelog rows and a dead letter under the limit (a refused
changelog row or dead letter fails stop, by design): a declarative join whose dimension carries
a 10,000-character profile, copied into each output under long field names. The dimension's
state row and the join's row hold the profile once, without field names; the output holds it
with them, ~400 bytes more; the visit that is dead-lettered is small.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.harness import Names, produce, read_all, wait_for

LIMIT = 10_400  # bytes: over every state row (~10,100), under the big output (~10,600)
N = "_name_long_enough_to_make_the_output_bigger_than_the_state_rows"  # 62 characters


def spec(p: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "profiles",
            "events": {
                "topic": f"{p}-etj-visits",
                "key": "user",
                "time": "t",
                "id": "id",
                "fields": {
                    "id": "str",
                    "user": "str",
                    "t": "time",
                    "page" + N: "str",
                    "site" + N: "str",
                    "lang" + N: "str",
                },
                "copy": ["user", "t", "page" + N, "site" + N, "lang" + N],
            },
            "dimension": {
                "topic": f"{p}-etj-profiles",
                "key": "user",
                "time": "t",
                "fields": {"user": "str", "profile": "str", "t": "time"},
                "copy": ["profile"],
                "time_as": "profile_time" + N,
            },
            "output": f"{p}-etj-profiled-visits",
            "ticks": f"{p}-etj-profiles-ticks",
            "mode": "left",
            "asof": "before",
            "retention_ms": 86_400_000,
        }
    ]


def visit(vid: str, user: str, t: int) -> dict[str, Any]:
    return {"id": vid, "user": user, "t": t, "page" + N: "home", "site" + N: "s", "lang" + N: "en"}


USERS = {f"u{i}": f"profile of u{i}" for i in range(6)}
USERS["big"] = "p" * 10_000


async def outputs(names: Names) -> dict[str, Any]:
    return {
        v["id"]: v
        for _, v in await read_all(names, f"{names.prefix}-etj-profiled-visits", idle_s=1.5)
    }


async def dead_letters(names: Names) -> list[Any]:
    return [v for _, v in await read_all(names, names.dead_letter_topic, idle_s=1.5)]


async def test_an_output_refused_for_good_dead_letters_its_input_and_the_worker_goes_on(
    names, worker_factory, tmp_path
):
    p = names.prefix
    spec_file = tmp_path / "joins.json"
    spec_file.write_text(json.dumps(spec(p)))
    env = {"joins_file": spec_file, "producer_max_request_bytes": LIMIT}
    first = worker_factory(names, name="first", **env).wait_ready()

    # 1. every profile first (its state rows fit), then the visits: one per user, "v-big"'s
    #    output holds the 10,000-character profile and is refused by the producer
    await produce(
        names,
        f"{p}-etj-profiles",
        [(u, {"user": u, "profile": text, "t": 100}) for u, text in USERS.items()],
    )
    visits = [(u, visit(f"v-{u}", u, 200 + i)) for i, u in enumerate(USERS)]
    await produce(names, f"{p}-etj-visits", visits)

    async def all_but_big() -> dict[str, Any] | None:
        out = await outputs(names)
        return out if len(out) >= len(USERS) - 1 else None

    out = await wait_for(all_but_big, timeout_s=90)
    assert out is not None, "not every normal visit was joined"
    dead = await wait_for(lambda: dead_letters(names), timeout_s=30)

    # 2. the worker did not exit; the big visit's input is a dead letter naming the refusal
    assert first.proc is not None and first.proc.poll() is None, first.log()[-3000:]
    [letter] = dead
    assert letter["topic"] == f"{p}-etj-visits" and json.loads(letter["value"])["id"] == "v-big"
    assert letter["error"].startswith("output refused by the broker: MessageSizeTooLargeError")
    assert "max_request_size" in letter["error"] and "key 'v-big'" in letter["error"]

    # 3. every other visit is exact: revision 1 with its user's profile
    assert set(out) == {f"v-{u}" for u in USERS if u != "big"}
    for u, text in USERS.items():
        if u != "big":
            r = out[f"v-{u}"]
            assert (r["revision"], r["profile"], r["user"]) == (1, text, u), r

    # 4. a restart reads nothing again (the big visit was acked once its dead letter was in):
    #    one more visit is joined, and the dead letter is still the only one
    assert first.stop() == 0
    second = worker_factory(names, name="second", **env).wait_ready()
    await produce(names, f"{p}-etj-visits", [("u0", visit("v-after", "u0", 900))])

    async def after() -> dict[str, Any] | None:
        out = await outputs(names)
        return out if "v-after" in out else None

    assert await wait_for(after, timeout_s=90), "the restarted worker joined nothing"
    await asyncio.sleep(3)
    assert [d["value"] for d in await dead_letters(names)] == [letter["value"]]
    assert second.proc is not None and second.proc.poll() is None
    assert "fail-stop" not in first.log() + second.log()

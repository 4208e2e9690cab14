"""``faust -A app.main topics create`` on the real broker: the plan first (nothing created),
then every missing topic but the inputs, with its join's partition count, then the inputs with
``--inputs``; a second run creates nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from aiokafka.admin import AIOKafkaAdminClient

from tests.broker.test_spec_shapes_broker import shaped_spec
from tests.harness import Names, bootstrap


def run(names: Names, joins_file: str, *args: str) -> str:
    env = {**os.environ, **names.env, "ETJ_JOINS_FILE": joins_file}
    done = subprocess.run(
        [sys.executable, "-m", "faust", "-A", "app.main", "topics", "create", *args],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


async def partitions(names: Names) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(names), **names.client_auth())
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.startswith(names.prefix)]
        if not mine:  # an empty list asks for every topic of the broker, other tests' too
            return {}
        return {
            d["topic"]: len(d["partitions"])
            for d in await admin.describe_topics(mine)
            if d["topic"] in mine
        }
    finally:
        await admin.close()


def test_topics_create_plans_then_creates_what_a_worker_needs(names: Names, tmp_path):
    raw = shaped_spec(names.prefix, partitions=3)
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    app_id = names.env["ETJ_APP_ID"]
    changelogs = [f"{app_id}-shaped-{t}-changelog" for t in ("dimension", "joins", "clock")]

    plan = run(names, str(path), "--dry-run")
    assert f"would create   {raw['ticks']} (internal of shaped, 3 partitions" in plan, plan
    assert (
        f"would create   {changelogs[0]} (internal of shaped, 3 partitions, "
        "cleanup.policy=compact)" in plan
    ), plan
    assert f"missing  {raw['events']['topic']} (input of shaped: created with --inputs)" in plan
    assert asyncio.run(partitions(names)) == {}

    said = run(names, str(path))
    have = asyncio.run(partitions(names))
    assert {
        raw["ticks"]: 3,
        raw["output"]: 4,
        changelogs[1]: 3,
        names.dead_letter_topic: 4,
        f"{app_id}-__assignor-__leader": 1,
    }.items() <= have.items(), (said, have)
    assert raw["events"]["topic"] not in have

    said = run(names, str(path), "--inputs")
    have = asyncio.run(partitions(names))
    assert have[raw["events"]["topic"]] == 3 and have[raw["dimension"]["topic"]] == 3, said
    again = run(names, str(path), "--inputs")
    assert "create " not in again
    # tansu does not answer DescribeConfigs: the $timestamp input's type is unknown, and named
    assert (
        f"warning  input topic {raw['dimension']['topic']}: a join's event time is its "
        "Kafka timestamp ($timestamp) and its message.timestamp.type is unknown"
    ) in again

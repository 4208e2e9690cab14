"""Refuse to start when a join spec's topics are not co-partitioned (app.copartition).

The check needs the broker, so it runs when the app first starts, before it consumes: it is
chained after :meth:`app.faust_app.EtjApp.on_first_start` (which checks the car join and the
original mood topics) rather than edited into it.
"""

from __future__ import annotations

from typing import Any

from app.agents.event_join import engines
from app.copartition import check_copartitioning
from app.faust_app import app, settings
from app.joins.spec import copartition_groups


def _chain_on_first_start(target: Any) -> None:
    original = target.on_first_start

    async def on_first_start() -> None:
        await original()
        await check_copartitioning(settings.broker_url,
                                   copartition_groups(e.spec for e in engines.values()),
                                   settings.partitions)

    target.on_first_start = on_first_start


_chain_on_first_start(app)

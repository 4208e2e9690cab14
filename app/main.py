"""Entry point: ``faust -A app.main worker -l info``.

Importing this module registers, in data-flow order, the topics, tables, agents, timers and
commands of the app.
"""

from app.faust_app import app
from app.fetch_wait import set_fetch_max_wait_ms
from app import delivery, rebalance_fixes
from app import topics, tables  # noqa: F401  (topics -> tables)
from app.agents import mood_join  # noqa: F401  (agents)
from app.agents import event_join  # noqa: F401  (agents: every join spec, app.joins.catalog)
from app.agents import car_join  # noqa: F401  (agents: car positions x zone pollution)
from app import timers  # noqa: F401  (timers)
from app import stall_guard  # noqa: F401  (timers: re-read an input partition that stalled)
from app.joins import ticks, startup  # noqa: F401  (join specs: ticks, co-partition check)
from app.commands import sample_traffic  # noqa: F401  (tools)
from app.commands import archive  # noqa: F401  (tools: a topic -> JSON lines, for app.batch)
from app.joins import commands as join_commands  # noqa: F401  (tools: join-latest NAME)
from app import views  # noqa: F401  (views: state, health, metrics over HTTP)
from app.joins import views as join_views  # noqa: F401  (GET /joins/: the join specs)
from app import timeline  # noqa: F401  (the live timeline page, /timeline/)

set_fetch_max_wait_ms(app.etj.consumer_fetch_max_wait_ms)  # tansu holds fetches: app.fetch_wait
delivery.install(app)  # re-send through broker stalls, fail-stop on a lost send
rebalance_fixes.install()  # no input record committed unhandled: app.rebalance_fixes

__all__ = ["app"]

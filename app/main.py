"""Entry point: ``faust -A app.main worker -l info``.

Importing this module registers the app in data-flow order: topics and tables (every join's,
from the spec list) -> agents -> timers -> tools -> views; first the views' bearer token
(:mod:`app.web.auth`: the web server is made by the first route), the changes to Faust and
aiokafka the guarantees rest on (:mod:`app.compat`), the fail-stop sensor
(:mod:`app.outputs.delivery`), the stall guard's (:mod:`app.loop.stall_guard`) and the
snapshots' (:mod:`app.state.snapshot_service`) timers, and the process's event loop and
collector (:mod:`app.runtime`).
"""

from app import compat, runtime
from app.faust_app import app
from app.loop import stall_guard
from app.outputs import delivery
from app.state import snapshot_service
from app.web import auth

auth.install(app)  # the views' bearer token: read (an empty one refused) before any route
compat.install(app)  # refuse an untested Faust/aiokafka before anything is declared
delivery.install(app)  # a send that failed after the producer gave up: fail-stop
stall_guard.install(app, app.etj.stall_check_s)  # timer: inputs read past, never handed over
snapshot_service.install(app)  # ETJ_SNAPSHOT_URL: snapshots written on a timer, restored
runtime.use_event_loop(app.etj)  # before `faust worker` makes its loop (Faust ignores its own -L)
runtime.use_gc_thresholds()  # fewer collections: a table of a million rows is long-lived
from app import topology
from app.agents import (
    event_join,
    fk_join,  # noqa: F401  (agents: two per foreign-key spec)
    repartition,  # noqa: F401  (agents: a repartitioned side's hop)
)

if topology.cars:  # ETJ_BUILTIN_JOINS
    from app.agents import car_join  # noqa: F401  (the car join's agents, in its words)
from app import timers  # noqa: F401  (timers: revisit ticks for every agent)
from app.commands import (
    archive,  # noqa: F401  (tools: a topic -> JSON lines, for app.batch)
    dead_letters,  # noqa: F401  (tools: dead-letters replay [--join NAME] [--since T] [--dry-run])
    join_latest,  # noqa: F401  (tools: join-latest NAME)
    joins,  # noqa: F401  (tools: joins validate [FILE], offline)
    sample_traffic,  # noqa: F401  (tools)
    sink,  # noqa: F401  (tools: sink postgres --join NAME --dsn DSN)
    snapshots,  # noqa: F401  (tools: the table snapshots in a store)
    topics,  # noqa: F401  (tools: topics create [--inputs] [--dry-run], offline too)
)
from app.web import views  # noqa: F401  (views: state, health, metrics over HTTP; GET /joins/)

if event_join.engines:  # the timeline draws any event-time join (and the car join's zones)
    from app.web import timeline  # noqa: F401  (the live timeline page, /timeline/)

__all__ = ["app"]

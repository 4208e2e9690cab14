"""Views: the join state over HTTP, health, readiness and Prometheus metrics.

Keyed views answer from the worker that owns the key, whichever pod is asked: the request is
forwarded to the owner (one hop) and its answer returned as is.

Why not plain ``@app.table_route``: Faust locates a key by hashing the key *as the table's
changelog serialises it* (JSON here: ``"alice"`` with quotes), but a table row lives in the
partition of the *input* record that wrote it, keyed by the raw UTF-8 bytes (``alice``). The two
hashes differ for most keys, so ``table_route`` would ask the wrong worker about half the time.
:func:`routed` hashes the raw key exactly as the producers of the inputs do (murmur2, Kafka's
default partitioner) and looks the owner up in the same assignor metadata ``table_route`` uses.

Car and zone ids route the same way (records are keyed by the id's decimal text). A car's view
needs two owners: its position is kept with the car id, its zone's reading with the zone id, so
the car's owner asks the zone's owner in turn.

Every answer is JSON; an unknown key is a 404 with a JSON body; a worker that is recovering its
tables answers 503 for its keys (it would otherwise report a half-recovered table as truth).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from itertools import islice
from typing import Any, cast

import aiohttp
from faust.types import TP
from faust.web import Request, Response, View
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from yarl import URL

from app import metrics, topology
from app.agents.event_join import engines
from app.compat.table_manager import EtjTableManager
from app.faust_app import app, settings
from app.joins import car_state
from app.joins.joins_table import stored_versions
from app.kafka.partitioner import partition_for
from app.logic.car_join import ZoneReading, join
from app.state.snapshot_service import restoring
from app.web.auth import peer_headers
from app.web.gauges import refresh_gauges
from app.web.join_readers import EventTimeReader, JoinReader, parse_id, readers

#: the mood join's engine: /moods/ and /joins/{consultant}/ read its tables (when this worker
#: runs it: ETJ_BUILTIN_JOINS; the car views likewise)
mood_engine = engines.get("moods")
mood_history = None if mood_engine is None else mood_engine.tables.history
recent_joins = None if mood_engine is None else mood_engine.tables.joins
car_topology = topology.cars
car_positions = None if car_topology is None else car_topology.positions
zone_pollution = None if car_topology is None else car_topology.pollution
zone_cars = None if car_topology is None else car_topology.zone_cars
MOODS, CARS = mood_engine is not None, car_topology is not None


def page_if(runs: bool, path: str) -> Callable[[Handler], type[View] | Handler]:
    """``app.page(path)`` for a view of a join this worker runs (the handler made a View
    class); none otherwise (the handler as it is)."""
    return app.page(path) if runs else (lambda fun: fun)


log = logging.getLogger(__name__)

#: header set on a forwarded request: the receiver answers itself, so a disagreement about the
#: owner during a rebalance costs one wrong hop at most, never a forwarding loop
FORWARDED = "X-Etj-Forwarded-By"
FORWARD_TIMEOUT_S = 10.0

Handler = Callable[..., Awaitable[Response]]


# ---- readiness and ownership --------------------------------------------------------------


def recovery_state() -> dict[str, Any]:
    """Whether this worker's tables are recovered (first assignment done, none in progress;
    snapshots being installed count as recovering: app.state.snapshot_service): ``ready``,
    for the keyed views (:func:`at_owner`) and ``etj_ready``; ``serving``, for ``/ready/``."""
    # the app's TableManager setting (app.faust_app): Faust's TableManagerT has no recovery
    recovery = cast(EtjTableManager, app.tables).recovery
    recovered_once = recovery.completed.is_set()
    recovering = bool(app.in_recovery) or restoring()
    remaining = recovery.active_remaining_total() if recovering else 0
    return {
        "ready": recovered_once and not recovering,
        "serving": recovered_once and not app.crashed,
        "recovering": recovering,
        "recovered_once": recovered_once,
        "active_remaining": remaining,
    }


def input_partition(raw_key: str) -> int:
    """The partition a record keyed ``raw_key`` (UTF-8) lands in: murmur2, like the producers."""
    return partition_for(raw_key.encode(), settings.partitions)


def worker_ident(url: URL | str) -> tuple[str, int]:
    """(host, port) of a worker's URL: what tells two workers apart (this one, a key's owner,
    the timeline's peers), whatever else their URLs say."""
    u = URL(str(url))
    return (u.host or "", int(u.port or 80))


def owner_of(table: Any, partition: int) -> URL | None:
    """URL of the worker that has ``partition`` of ``table`` active, per the group assignment."""
    topic = table.changelog_topic.get_topic_name()
    for url, topics in app.router.table_metadata(table.name).items():
        if partition in topics.get(topic, ()):
            return URL(str(url))
    return None


def routed(
    table: Any, param: str, parse: Callable[[str], Any] | None = None
) -> Callable[[Handler], Handler]:
    """Answer on the worker that owns the URL's ``param`` key of ``table`` (see module doc).

    ``parse`` turns the URL text into the table key (e.g. ``int``); a ValueError is a 404, as
    no record can have that key. The handler gets the parsed key as ``param`` and the
    partition as ``partition``. A bug in a handler is a JSON 500, never an HTML page.
    ``table`` None: a view of a join this worker does not run (not registered: ``page_if``).
    """

    def decorate(fun: Handler) -> Handler:
        if table is None:
            return fun

        @wraps(fun)
        async def get(view: View, request: Request, **kwargs: Any) -> Response:
            text = request.match_info[param]
            try:
                key = parse(text) if parse is not None else text
            except ValueError as exc:
                return view.error(404, f"unknown {param} {text!r}: {exc}", None, **{param: text})
            partition = input_partition(str(key))
            return await at_owner(
                view,
                request,
                table,
                partition,
                lambda: fun(view, request, **{**kwargs, param: key, "partition": partition}),
                fun.__name__,
                **{param: text},
            )

        return get

    return decorate


async def at_owner(
    view: View,
    request: Request,
    table: Any,
    partition: int,
    answer: Callable[[], Awaitable[Response]],
    what: str,
    **about: Any,
) -> Response:
    """``answer()`` on the worker that has ``partition`` of ``table`` active: forwarded there
    (one hop) from any other; 503 while this worker recovers or the partition moves; a bug in
    ``answer`` is a JSON 500 naming ``about`` (the URL's key), never an HTML page."""
    owner = owner_of(table, partition)
    here = worker_ident(app.conf.canonical_url)
    if owner is not None and worker_ident(owner) != here and FORWARDED not in request.headers:
        return await forward(view, request, owner)
    state = recovery_state()
    if not state["ready"]:
        return view.error(503, "tables are recovering; retry", **state)
    active = TP(table.changelog_topic.get_topic_name(), partition)
    if not app.assignor.is_active(active):
        return view.error(
            503,
            "partition not owned here (rebalancing?); retry",
            partition=partition,
            owner=str(owner) if owner else None,
        )
    try:
        return await answer()
    except Exception as exc:  # a bug must answer JSON, and be in the log
        log.exception("view %s failed for %r", what, about)
        return view.error(500, f"internal error: {exc!r}", **about)


async def forward(view: View, request: Request, owner: URL) -> Response:
    """Ask the owner, return its answer (status and body) unchanged."""
    url = (
        request.url.with_scheme(owner.scheme or "http")
        .with_host(owner.host or "")
        .with_port(owner.port)
    )
    headers = {
        "Accept": request.headers.get("Accept", "application/json"),
        FORWARDED: str(app.conf.canonical_url),
        **peer_headers(),
    }
    try:
        async with app.http_client.get(
            url, headers=headers, timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)
        ) as resp:
            body = await resp.read()
            return view.bytes(body, content_type=resp.content_type, status=resp.status)
    except (TimeoutError, aiohttp.ClientError) as exc:
        return view.error(502, f"owner {owner} did not answer: {exc!r}", owner=str(owner))
    except RuntimeError as exc:
        # aiohttp's "Session is closed": this worker is stopping (Faust closes its HTTP client
        # before its web server), so a request forwarded now failed as an HTML 500 during a
        # pod's stop (seen in a rolling restart). A 503 says what a client does: ask again.
        if "Session is closed" not in str(exc):
            raise
        return view.error(503, "this worker is stopping; retry", owner=str(owner))


async def ask(owner: URL, path_qs: str) -> tuple[int, Any]:
    """GET ``path_qs`` of the worker ``owner`` itself (no further hop): (status, JSON body)."""
    url = URL(str(owner)).with_path("").join(URL(path_qs))
    headers = {
        "Accept": "application/json",
        FORWARDED: str(app.conf.canonical_url),
        **peer_headers(),
    }
    async with app.http_client.get(
        url, headers=headers, timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)
    ) as resp:
        return resp.status, await resp.json(content_type=None)


def served_by() -> str:
    return str(app.conf.canonical_url)


# ---- keyed views ----------------------------------------------------------------------------


@page_if(MOODS, "/moods/{consultant}/")
@routed(mood_history, "consultant")
async def moods(view: View, request: Request, consultant: str, partition: int) -> Response:
    """Mood history of a consultant: [(event time, mood)], oldest first, as the join sees it."""
    history = stored_versions(recent_joins, mood_history, consultant, partition)
    if history is None and not _joins_of(consultant, partition):
        return view.error(404, f"unknown consultant {consultant!r}", consultant=consultant)
    return view.json(
        {
            "consultant": consultant,
            "partition": partition,
            "served_by": served_by(),
            "moods": [{"event_time": t, "mood": m} for t, m in history or []],
        }
    )


# -> {"consultant", "partition", "served_by", "moods": [{"event_time", "mood"}, ...]}


def _joins_of(consultant: str, partition: int) -> list[tuple[str, Any]]:
    """(join id, join) of a consultant's joins in retention, by event time."""
    moods = cast(EventTimeReader, readers["moods"])  # the built-in mood join: an event-time one
    return moods.joins_of(consultant, partition)


#: the fields of a /joins/{consultant}/ row (its latest revision, without the consultant)
JOIN_ROW = (
    "id",
    "event_time",
    "recommendation",
    "mood",
    "mood_event_time",
    "revision",
    "cause",
    "previous_mood",
)


@app.page("/joins/")
async def list_joins(view: View, request: Request) -> Response:
    """Every join this worker runs (a spec's topics, fields, mode, as-of rule, retention,
    window; the car join's topics and key) and this worker's counters of it (not routed: every
    worker runs the same joins)."""
    return view.json({"joins": [described(r) for r in readers.values()]})


# -> {"joins": [{"name", "kind", "key", "key_url", "events": {...}, "dimension": {...},
#                "output", ..., "counters": {"records", "held", ...}}]}


def described(reader: JoinReader) -> dict[str, Any]:
    return {**reader.describe(), "counters": metrics.snapshot(reader.name)}


@app.page("/joins/{name}/")
async def join_or_consultant(view: View, request: Request, name: str) -> Response:
    """``name`` a join's name: that join described (as one row of ``/joins/``); otherwise the
    mood join's view of the consultant ``name`` (the URL's meaning before every join could be
    looked at: it keeps answering it). A consultant whose name is a join's is read at
    ``/joins/moods/<consultant>/``."""
    reader = readers.get(name)
    if reader is not None:
        return view.json(described(reader))
    if not MOODS:
        return view.error(404, f"unknown join {name!r}", join=name, joins=sorted(readers))
    return await consultant_joins(view, request)


@routed(recent_joins, "name")
async def consultant_joins(view: View, request: Request, name: str, partition: int) -> Response:
    """A consultant's recent joins (newer than the horizon) with current revision and cause."""
    consultant = name
    found = _joins_of(consultant, partition)
    if not found and stored_versions(recent_joins, mood_history, consultant, partition) is None:
        return view.error(404, f"unknown consultant {consultant!r}", consultant=consultant)
    rows = []
    assert mood_engine is not None  # called only when MOODS (join_or_consultant)
    spec = mood_engine.spec
    for jid, j in found:
        rev = spec.rules.current(jid, consultant, j)
        if rev is not None:  # left mode: every join has been emitted
            wire = spec.to_wire(rev)
            rows.append({f: wire[f] for f in JOIN_ROW})
    rows.sort(key=lambda r: (r["event_time"], r["id"]))
    return view.json(
        {"consultant": consultant, "partition": partition, "served_by": served_by(), "joins": rows}
    )


# -> {"consultant", "partition", "served_by", "joins": [{"id", "event_time", ..., "cause"}]}


@app.page("/joins/{name}/{key}/")
async def join_key_view(view: View, request: Request, name: str, key: str) -> Response:
    """One key of any join (the join key: the dimension's key), answered by the worker that
    owns it: its versions and its joins' latest revisions (app.web.join_readers)."""
    reader = readers.get(name)
    if reader is None:
        return view.error(404, f"unknown join {name!r}", join=name, joins=sorted(readers))
    try:
        parsed = reader.parse_key(key)
    except ValueError as exc:
        return view.error(404, f"unknown key {key!r} of join {name!r}: {exc}", join=name, key=key)
    partition = reader.partition_of(parsed)

    async def answer() -> Response:
        found = reader.read(parsed, partition)
        if found is None:
            return view.error(404, f"unknown key {key!r} of join {name!r}", join=name, key=key)
        return view.json(
            {
                "join": name,
                "kind": reader.kind,
                "key": parsed,
                "partition": partition,
                "served_by": served_by(),
                **found,
            }
        )

    return await at_owner(
        view, request, reader.table, partition, answer, "join_key_view", join=name, key=key
    )


# -> {"join", "kind", "key", "partition", "served_by", "versions": [{"event_time", ...}],
#     "joins": [latest revision of each join, as the output carries it], "held",
#     "stream_time", "retention_horizon"}   (the last two for event-time joins)


#: most cars one /zones/{zone_id}/cars/ answer lists (``?limit=``, up to MAX_CARS_LIMIT)
DEFAULT_CARS_LIMIT = 1000
MAX_CARS_LIMIT = 100_000


def zone_reading(zone_id: int) -> ZoneReading | None:
    assert zone_pollution is not None  # read by the car views, registered only when CARS
    row = zone_pollution.get(zone_id)
    return None if row is None else car_state.reading_of(zone_id, row)


@page_if(CARS, "/zones/{zone_id}/cars/")
@routed(zone_pollution, "zone_id", parse=parse_id)
async def cars_in_zone(view: View, request: Request, zone_id: int, partition: int) -> Response:
    """The cars now in a zone (a range scan of its (zone_id, ·) keys), joined with its reading.

    ``?limit=N`` caps the list (default 1000); ``truncated`` says whether more cars are in it.
    """
    try:
        limit = int(request.query.get("limit", DEFAULT_CARS_LIMIT))
        if not 0 <= limit <= MAX_CARS_LIMIT:
            raise ValueError
    except ValueError:
        return view.error(400, f"limit must be an integer in [0, {MAX_CARS_LIMIT}]")
    reading = zone_reading(zone_id)
    # list() before any await: the RocksDB iterator must not outlive this event-loop step
    found = list(islice(car_state.cars_in_zone(zone_cars, zone_id, partition), limit + 1))
    if reading is None and not found:
        return view.error(404, f"unknown zone {zone_id}: no reading and no car", zone_id=zone_id)
    cars = [join(arrival, reading).to_wire() for arrival in found[:limit]]
    return view.json(
        {
            "zone_id": zone_id,
            "partition": partition,
            "served_by": served_by(),
            "pollution_level": None if reading is None else reading.pollution_level,
            "zone_event_time": None if reading is None else reading.event_time,
            "cars": cars,
            "truncated": len(found) > limit,
        }
    )


# -> {"zone_id", "partition", "served_by", "pollution_level", "zone_event_time",
#     "cars": [{car_id, zone_id, fuel_level, pollution_level, car_event_time, zone_event_time}],
#     "truncated"}   (cars ordered by car id)


@page_if(CARS, "/cars/{car_id}/")
@routed(car_positions, "car_id", parse=parse_id)
async def car(view: View, request: Request, car_id: int, partition: int) -> Response:
    """A car's current joined view: its newest arrival with its zone's newest reading.

    The car's position lives with its car id, the zone's reading with the zone id, often on
    another worker: the car's owner asks the zone's owner (one more hop). This is what a
    consumer of etj-car-pollution converges to, read from state instead of the output topic.
    """
    # registered only when this worker runs the car join (CARS: page_if)
    assert car_positions is not None and zone_pollution is not None
    row = car_positions.get(car_id)
    if row is None:
        return view.error(404, f"unknown car {car_id}", car_id=car_id)
    arrival = car_state.position_of(car_id, row).arrival
    zone_id = arrival.to_zone_id
    zone_partition = input_partition(str(zone_id))
    owner = owner_of(zone_pollution, zone_partition)
    here = worker_ident(app.conf.canonical_url)
    if owner is None or worker_ident(owner) == here:
        if not app.assignor.is_active(
            TP(zone_pollution.changelog_topic.get_topic_name(), zone_partition)
        ):
            return view.error(
                503,
                f"no worker owns zone {zone_id}'s partition (rebalancing?)",
                car_id=car_id,
                zone_id=zone_id,
            )
        reading, zone_served_by = zone_reading(zone_id), served_by()
    else:
        try:
            status, body = await ask(owner, f"/zones/{zone_id}/cars/?limit=0")
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            return view.error(
                502, f"zone owner {owner} did not answer: {exc!r}", car_id=car_id, zone_id=zone_id
            )
        if status == 404:
            reading = None
        elif status == 200:
            reading = (
                None
                if body["zone_event_time"] is None
                else ZoneReading(zone_id, body["pollution_level"], body["zone_event_time"])
            )
        else:
            return view.error(
                503 if status == 503 else 502,
                f"zone owner {owner} answered {status}",
                car_id=car_id,
                zone_id=zone_id,
                zone_answer=body,
            )
        zone_served_by = str(owner)
    return view.json(
        {
            **join(arrival, reading).to_wire(),
            "partition": partition,
            "served_by": served_by(),
            "zone_served_by": zone_served_by,
        }
    )


# -> {"car_id", "zone_id", "fuel_level", "pollution_level", "car_event_time", "zone_event_time",
#     "partition", "served_by", "zone_served_by"}


# ---- this worker: stats, health, readiness, metrics ---------------------------------------


@app.page("/stats/")
async def stats(view: View, request: Request) -> Response:
    """This worker's counters, per-partition clocks and state sizes (not routed: per worker)."""
    current = refresh_gauges(recovery_state())
    revisions = metrics.totals(metrics.revisions_out, "cause")
    return view.json(
        {
            "served_by": served_by(),
            "ready": current["recovery"]["ready"],
            "recovery": current["recovery"],
            "records_in": metrics.totals(metrics.records_in, "topic"),
            "joins": int(revisions.get("arrival", 0)),
            "corrections": int(sum(v for c, v in revisions.items() if c != "arrival")),
            "revisions_by_cause": revisions,
            "joins_finalised": int(sum(metrics.totals(metrics.joins_finalised).values())),
            "late": metrics.totals(metrics.late_records, "topic"),
            "dead_letters": metrics.totals(metrics.dead_letters, "topic"),
            "car_moves": metrics.totals(metrics.car_moves, "op"),
            "car_outputs": metrics.totals(metrics.car_outputs, "cause"),
            "retention_ms": settings.retention_ms,
            "partitions": current["partitions"],
            "join_partitions": current["joins"],
            "tables": current["tables"],
            "rocksdb_memory": current["rocksdb_memory"],
            "input_lag": current["input_lag"],
        }
    )


# -> {"records_in": {topic: n}, "joins", "corrections", "late", "dead_letters", "car_moves",
#     "car_outputs",
#     "partitions": {p: {"stream_time", "retention_horizon"}}, "tables": {name: n},
#     "rocksdb_memory": {"memtables", "memtables_budget", "block_cache", "block_cache_budget"},
#     "input_lag": {"<join>/<topic>/<partition>": records not handled yet}}


@app.page("/health/")
async def health(view: View, request: Request) -> Response:
    """Liveness: the event loop answers and the app has not crashed."""
    if app.crashed:
        return view.error(503, "app crashed", state=app.state)
    return view.json({"status": "ok", "state": app.state, "served_by": served_by()})


@app.page("/ready/")
async def ready(view: View, request: Request) -> Response:
    """Readiness (the chart's probe): 503 until the tables are recovered the first time, then
    200 through later rebalances: a recovering pod forwards a key to its owner and answers 503
    for its own keys (:func:`at_owner`), so it stays an endpoint (docs/operating/scaling.md)."""
    state = recovery_state()
    return view.json({**state, "served_by": served_by()}, status=200 if state["serving"] else 503)


@app.page("/metrics")
async def prometheus_metrics(view: View, request: Request) -> Response:
    """Prometheus text exposition of this worker's registry."""
    refresh_gauges(recovery_state())
    # text format 0.0.4 (every Prometheus reads it); aiohttp refuses a type carrying a charset
    ctype = CONTENT_TYPE_PLAIN_0_0_4.replace("; charset=utf-8", "")
    return view.bytes(generate_latest(), content_type=ctype)

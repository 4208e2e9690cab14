"""Views: the join state over HTTP, health, readiness and Prometheus metrics.

Keyed views answer from the worker that owns the key, whichever pod is asked: the request is
forwarded to the owner (one hop) and its answer returned as is.

Why not plain ``@app.table_route``: Faust locates a key by hashing the key *as the table's
changelog serialises it* (JSON here: ``"alice"`` with quotes), but a table row lives in the
partition of the *input* record that wrote it, keyed by the raw UTF-8 bytes (``alice``). The two
hashes differ for most keys, so ``table_route`` would ask the wrong worker about half the time.
:func:`routed` hashes the raw key exactly as the producers of the inputs do (murmur2, Kafka's
default partitioner) and looks the owner up in the same assignor metadata ``table_route`` uses.

Every answer is JSON; an unknown key is a 404 with a JSON body; a worker that is still
recovering its tables answers 503 (it would otherwise report a half-recovered table as truth).
"""

from __future__ import annotations

import asyncio
import logging
from functools import wraps
from typing import Any, Awaitable, Callable

import aiohttp
from aiokafka.partitioner import DefaultPartitioner
from faust.types import TP
from faust.web import Request, Response, View
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from yarl import URL

from app import metrics
from app.faust_app import app, settings
from app.logic.mood_join import Join
from app.tables import active_keys, mood_history, recent_joins, stream_clock

log = logging.getLogger(__name__)

#: header set on a forwarded request: the receiver answers itself, so a disagreement about the
#: owner during a rebalance costs one wrong hop at most, never a forwarding loop
FORWARDED = "X-Etj-Forwarded-By"
FORWARD_TIMEOUT_S = 10.0

Handler = Callable[..., Awaitable[Response]]
_partitioner = DefaultPartitioner()


# ---- readiness and ownership --------------------------------------------------------------

def recovery_state() -> dict[str, Any]:
    """Whether this worker's tables are recovered (first assignment done, none in progress)."""
    recovery = app.tables.recovery
    recovered_once = recovery.completed.is_set()
    recovering = bool(app.in_recovery)
    remaining = recovery.active_remaining_total() if recovering else 0
    return {"ready": recovered_once and not recovering, "recovering": recovering,
            "recovered_once": recovered_once, "active_remaining": remaining}


def input_partition(raw_key: str) -> int:
    """The partition a record keyed ``raw_key`` (UTF-8) lands in: murmur2, like the producers."""
    parts = list(range(settings.partitions))
    return int(_partitioner(raw_key.encode(), parts, parts))


def _ident(url: URL | str) -> tuple[str, int]:
    u = URL(str(url))
    return (u.host or "", int(u.port or 80))


def owner_of(table: Any, partition: int) -> URL | None:
    """URL of the worker that has ``partition`` of ``table`` active, per the group assignment."""
    topic = table.changelog_topic.get_topic_name()
    for url, topics in app.router.table_metadata(table.name).items():
        if partition in topics.get(topic, ()):
            return URL(str(url))
    return None


def owned_partitions() -> list[int]:
    """Partitions of the mood join this worker has active (those of its moods topic)."""
    return sorted(tp.partition for tp in app.assignor.assigned_actives()
                  if tp.topic == settings.moods_topic)


def routed(table: Any, param: str) -> Callable[[Handler], Handler]:
    """Answer on the worker that owns the URL's ``param`` key of ``table`` (see module doc)."""

    def decorate(fun: Handler) -> Handler:
        @wraps(fun)
        async def get(view: View, request: Request, **kwargs: Any) -> Response:
            key = request.match_info[param]
            partition = input_partition(key)
            owner = owner_of(table, partition)
            here = _ident(app.conf.canonical_url)
            if owner is not None and _ident(owner) != here and FORWARDED not in request.headers:
                return await forward(view, request, owner)
            state = recovery_state()
            if not state["ready"]:
                return view.error(503, "tables are recovering; retry", **state)
            active = TP(table.changelog_topic.get_topic_name(), partition)
            if not app.assignor.is_active(active):
                return view.error(503, "partition not owned here (rebalancing?); retry",
                                  partition=partition, owner=str(owner) if owner else None)
            return await fun(view, request, partition=partition, **kwargs)

        return get

    return decorate


async def forward(view: View, request: Request, owner: URL) -> Response:
    """Ask the owner, return its answer (status and body) unchanged."""
    url = request.url.with_scheme(owner.scheme or "http").with_host(owner.host or "") \
        .with_port(owner.port)
    headers = {"Accept": request.headers.get("Accept", "application/json"),
               FORWARDED: str(app.conf.canonical_url)}
    try:
        async with app.http_client.get(
                url, headers=headers,
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)) as resp:
            body = await resp.read()
            return view.bytes(body, content_type=resp.content_type, status=resp.status)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return view.error(502, f"owner {owner} did not answer: {exc!r}", owner=str(owner))


def served_by() -> str:
    return str(app.conf.canonical_url)


# ---- keyed views ----------------------------------------------------------------------------

@app.page("/moods/{consultant}/")
@routed(mood_history, "consultant")
async def moods(view: View, request: Request, consultant: str, partition: int) -> Response:
    """Mood history of a consultant: [(event time, mood)], oldest first, as the join sees it."""
    history = mood_history.get(consultant)
    if history is None and recent_joins.get(consultant) is None:
        return view.error(404, f"unknown consultant {consultant!r}", consultant=consultant)
    return view.json({
        "consultant": consultant, "partition": partition, "served_by": served_by(),
        "moods": [{"event_time": t, "mood": m} for t, m in history or []],
    })
# -> {"consultant", "partition", "served_by", "moods": [{"event_time", "mood"}, ...]}


@app.page("/joins/{consultant}/")
@routed(recent_joins, "consultant")
async def joins(view: View, request: Request, consultant: str, partition: int) -> Response:
    """A consultant's recent joins (newer than the horizon) with current revision and cause."""
    raw = recent_joins.get(consultant)
    if raw is None and mood_history.get(consultant) is None:
        return view.error(404, f"unknown consultant {consultant!r}", consultant=consultant)
    rows = []
    for jid, value in (raw or {}).items():
        j = Join.from_json(value)
        rows.append({"id": jid, "event_time": j.event_time, "recommendation": j.recommendation,
                     "mood": j.mood, "mood_event_time": j.mood_event_time,
                     "revision": j.revision, "cause": j.cause,
                     "previous_mood": j.previous_mood})
    rows.sort(key=lambda r: (r["event_time"], r["id"]))
    return view.json({"consultant": consultant, "partition": partition,
                      "served_by": served_by(), "joins": rows})
# -> {"consultant", "partition", "served_by", "joins": [{"id", "event_time", ..., "cause"}]}


# ---- this worker: stats, health, readiness, metrics ---------------------------------------

def partition_clocks() -> dict[str, dict[str, int | None]]:
    """Stream time and retention horizon of each partition this worker owns."""
    out: dict[str, dict[str, int | None]] = {}
    for p in owned_partitions():
        clock = stream_clock.get(p)
        out[str(p)] = {"stream_time": clock,
                       "retention_horizon": None if clock is None
                       else clock - settings.retention_ms,
                       "active_keys": len(active_keys.get(p) or [])}
    return out


def table_sizes() -> dict[str, int]:
    """Keys per table in the local store (rocksdb: active partitions; memory: + standbys)."""
    return {name: len(table) for name, table in sorted(app.tables.items())}


def refresh_gauges() -> dict[str, Any]:
    """Bring the state gauges up to date; return what they were set from."""
    state = recovery_state()
    clocks = partition_clocks()
    sizes = table_sizes()
    metrics.ready.set(1 if state["ready"] else 0)
    metrics.recovery_remaining.set(state["active_remaining"])
    for name, n in sizes.items():
        metrics.table_keys.labels(name).set(n)
    # partitions that moved to another worker must not keep reporting a clock from here
    for gauge in (metrics.stream_time, metrics.retention_horizon):
        for label in set(metrics.totals(gauge, "partition")) - set(clocks):
            gauge.remove(label)
    for p, c in clocks.items():
        if c["stream_time"] is not None:
            metrics.stream_time.labels(p).set(c["stream_time"])
            metrics.retention_horizon.labels(p).set(c["retention_horizon"])
    return {"recovery": state, "partitions": clocks, "tables": sizes}


@app.page("/stats/")
async def stats(view: View, request: Request) -> Response:
    """This worker's counters, per-partition clocks and state sizes (not routed: per worker)."""
    current = refresh_gauges()
    revisions = metrics.totals(metrics.revisions_out, "cause")
    return view.json({
        "served_by": served_by(),
        "ready": current["recovery"]["ready"],
        "recovery": current["recovery"],
        "records_in": metrics.totals(metrics.records_in, "topic"),
        "joins": int(revisions.get("arrival", 0)),
        "corrections": int(sum(v for c, v in revisions.items() if c != "arrival")),
        "revisions_by_cause": revisions,
        "joins_finalised": int(metrics.totals(metrics.joins_finalised).get("", 0)),
        "late": metrics.totals(metrics.late_records, "topic"),
        "dead_letters": metrics.totals(metrics.dead_letters, "topic"),
        "retention_ms": settings.retention_ms,
        "partitions": current["partitions"],
        "tables": current["tables"],
    })
# -> {"records_in": {topic: n}, "joins", "corrections", "late", "dead_letters",
#     "partitions": {p: {"stream_time", "retention_horizon", "active_keys"}}, "tables": {name: n}}


@app.page("/health/")
async def health(view: View, request: Request) -> Response:
    """Liveness: the event loop answers and the app has not crashed."""
    if app.crashed:
        return view.error(503, "app crashed", state=app.state)
    return view.json({"status": "ok", "state": app.state, "served_by": served_by()})


@app.page("/ready/")
async def ready(view: View, request: Request) -> Response:
    """Readiness: 503 until the tables are recovered (and again while a rebalance recovers)."""
    state = recovery_state()
    return view.json({**state, "served_by": served_by()}, status=200 if state["ready"] else 503)


@app.page("/metrics")
async def prometheus_metrics(view: View, request: Request) -> Response:
    """Prometheus text exposition of this worker's registry."""
    refresh_gauges()
    # text format 0.0.4 (every Prometheus reads it); aiohttp refuses a type carrying a charset
    ctype = CONTENT_TYPE_PLAIN_0_0_4.replace("; charset=utf-8", "")
    return view.bytes(generate_latest(), content_type=ctype)

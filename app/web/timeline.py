"""The live timeline page: ``/timeline/`` (static HTML/JS/CSS shipped in the package).

The page draws what the join holds from the JSON views of :mod:`app.web.views` (``/moods/…``,
``/joins/…``, ``/stats/``, ``/zones/…/cars/``), which answer from the worker owning a key, so
the page works whichever worker serves it. This module adds only what those views lack:

- ``/timeline/api/consultants/`` and ``/timeline/api/zones/``: the pickers' lists. Keys live
  on the workers that own them, so the list is gathered from every worker of the group (each
  answers ``…/local/`` for the partitions it has active, standby copies left out).
- ``/timeline/api/clock/{consultant}/``: stream time and retention horizon of the consultant's
  partition, answered by its owner (``/stats/`` reports only the serving worker's partitions);
- ``/timeline/api/joins/{join}/keys/``: the key picker's list for any event-time join
  (``/timeline/?join=<name>``), gathered the same way; that join's data is
  ``/joins/{join}/{key}/`` (:mod:`app.web.views`), which already answers from the owner.

No CDN and no build step: clusters (and these machines) often have no internet, so the assets
are plain files served by aiohttp's static route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from faust.web import Request, Response, View
from yarl import URL

from app.faust_app import app, settings
from app.joins.car_state import reading_of, zone_car_rows
from app.joins.keys import is_join_row, split_join_key
from app.topology import owned_partitions
from app.web.auth import peer_headers
from app.web.join_readers import EventTimeReader, readers
from app.web.views import (
    FORWARDED,
    MOODS,
    input_partition,
    mood_engine,
    mood_history,
    page_if,
    routed,
    served_by,
    worker_ident,
    zone_cars,
    zone_pollution,
)

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("static")
#: a peer that does not answer within this is reported as missing, not waited for
PEER_TIMEOUT_S = 3.0
#: the page polls every second; never let a browser or proxy cache an answer
NO_CACHE = {"Cache-Control": "no-store"}

app.web.add_static("/timeline/static/", STATIC_DIR)


@app.page("/timeline/")
async def timeline_page(view: View, request: Request) -> Response:
    """The page itself; its script and stylesheet come from ``/timeline/static/``."""
    html = (STATIC_DIR / "timeline.html").read_bytes()
    return view.bytes(html, content_type="text/html", headers=NO_CACHE)


# ---- which keys this worker owns ------------------------------------------------------------


def local_consultants() -> list[str]:
    """Consultants with state in partitions this worker owns (mood history or recent joins)."""
    if mood_engine is None:  # this worker does not run the mood join (ETJ_BUILTIN_JOINS)
        return []
    owned = set(owned_partitions(settings.moods_topic))
    tables = mood_engine.tables  # mood_history and recent_joins, known set here
    names = {str(k) for k in list(tables.history.keys())}
    names |= {split_join_key(k)[0] for k in list(tables.joins.keys()) if is_join_row(k)}
    return sorted(n for n in names if input_partition(n) in owned)


def local_zones() -> list[dict[str, Any]]:
    """Zones with a pollution reading in partitions this worker owns, with their car counts.

    A zone's cars are one key range of ``zone-cars`` (:mod:`app.joins.car_state`), so counting
    them reads that range only. Zones that have cars but no reading yet are not listed.
    """
    if zone_pollution is None:  # this worker does not run the car join (ETJ_BUILTIN_JOINS)
        return []
    owned = set(owned_partitions(settings.zones_topic))
    out = []
    for zone_id, row in list(zone_pollution.items()):
        partition = input_partition(str(zone_id))
        if partition not in owned or row is None:
            continue
        reading = reading_of(int(zone_id), row)
        cars = sum(1 for _ in zone_car_rows(zone_cars, reading.zone_id, partition))
        out.append(
            {
                "zone_id": reading.zone_id,
                "pollution_level": reading.pollution_level,
                "event_time": reading.event_time,
                "cars": cars,
            }
        )
    return sorted(out, key=lambda z: z["zone_id"])


# ---- gathering from every worker ------------------------------------------------------------


def peer_urls() -> list[URL]:
    """Every worker of the group, per the latest assignment (this one included)."""
    urls = {worker_ident(u): URL(str(u)) for u in app.router.tables_metadata()}
    urls.setdefault(worker_ident(app.conf.canonical_url), URL(str(app.conf.canonical_url)))
    return [urls[k] for k in sorted(urls)]


async def ask_peer(url: URL, path: str) -> dict[str, Any]:
    """GET ``path`` of worker ``url`` (its local answer), or an ``error`` saying why not."""
    try:
        async with app.http_client.get(
            url.with_path(path),
            headers={FORWARDED: served_by(), **peer_headers()},
            timeout=aiohttp.ClientTimeout(total=PEER_TIMEOUT_S),
        ) as resp:
            if resp.status != 200:
                return {"served_by": str(url), "error": f"HTTP {resp.status}"}
            body: dict[str, Any] = await resp.json()
            return body
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        return {"served_by": str(url), "error": repr(exc)}


async def gather(path: str, local: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    """The local answer of every worker: computed here for this one, asked of the others."""
    here = worker_ident(app.conf.canonical_url)
    return list(
        await asyncio.gather(
            *(
                _local(local) if worker_ident(url) == here else ask_peer(url, path)
                for url in peer_urls()
            )
        )
    )


async def _local(local: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return local()


def _workers(answers: list[dict[str, Any]], field: str) -> dict[str, Any]:
    """Per worker: how many items it gave, or its error (so the page can say who is missing)."""
    return {
        a.get("served_by", "?"): a["error"] if "error" in a else len(a.get(field, []))
        for a in answers
    }


# ---- views -----------------------------------------------------------------------------------


@app.page("/timeline/api/consultants/local/")
async def consultants_local(view: View, request: Request) -> Response:
    """Consultants whose partition this worker owns."""
    return view.json(
        {"served_by": served_by(), "consultants": local_consultants()}, headers=NO_CACHE
    )


@app.page("/timeline/api/consultants/")
async def consultants(view: View, request: Request) -> Response:
    """Every consultant with state, gathered from all workers, sorted."""
    answers = await gather(
        "/timeline/api/consultants/local/",
        lambda: {"served_by": served_by(), "consultants": local_consultants()},
    )
    names = sorted({n for a in answers for n in a.get("consultants", [])})
    return view.json(
        {"consultants": names, "workers": _workers(answers, "consultants")}, headers=NO_CACHE
    )


# -> {"consultants": [name, ...], "workers": {url: count | error}}


@app.page("/timeline/api/zones/local/")
async def zones_local(view: View, request: Request) -> Response:
    """Zones whose partition this worker owns."""
    return view.json({"served_by": served_by(), "zones": local_zones()}, headers=NO_CACHE)


@app.page("/timeline/api/zones/")
async def zones(view: View, request: Request) -> Response:
    """Every zone with a reading, its pollution and car count, gathered from all workers."""
    answers = await gather(
        "/timeline/api/zones/local/", lambda: {"served_by": served_by(), "zones": local_zones()}
    )
    rows = sorted((z for a in answers for z in a.get("zones", [])), key=lambda z: z["zone_id"])
    return view.json({"zones": rows, "workers": _workers(answers, "zones")}, headers=NO_CACHE)


# -> {"zones": [{"zone_id", "pollution_level", "event_time", "cars"}], "workers": {...}}


@page_if(MOODS, "/timeline/api/clock/{consultant}/")
@routed(mood_history, "consultant")
async def clock(view: View, request: Request, consultant: str, partition: int) -> Response:
    """Stream time and retention horizon of the partition that holds ``consultant``."""
    assert mood_engine is not None  # registered only when this worker runs it (page_if)
    stream_time = mood_engine.tables.clock.get(partition)
    return view.json(
        {
            "consultant": consultant,
            "partition": partition,
            "served_by": served_by(),
            "stream_time": stream_time,
            "retention_ms": settings.retention_ms,
            "retention_horizon": None
            if stream_time is None
            else stream_time - settings.retention_ms,
        },
        headers=NO_CACHE,
    )


# -> {"consultant", "partition", "served_by", "stream_time", "retention_ms", "retention_horizon"}


# ---- any event-time join (/timeline/?join=<name>) --------------------------------------------


def local_keys(name: str) -> dict[str, Any]:
    """The keys of event-time join ``name`` whose partition this worker owns."""
    reader = readers.get(name)
    if not isinstance(reader, EventTimeReader):
        return {"served_by": served_by(), "keys": [], "error": f"no event-time join {name!r}"}
    owned = set(owned_partitions(reader.engine.spec.ticks))
    return {"served_by": served_by(), "keys": sorted(reader.local_keys(owned))}


@app.page("/timeline/api/joins/{join}/keys/local/")
async def join_keys_local(view: View, request: Request, join: str) -> Response:
    """Keys of an event-time join whose partition this worker owns."""
    found = local_keys(join)
    return view.json(found, status=404 if "error" in found else 200, headers=NO_CACHE)


@app.page("/timeline/api/joins/{join}/keys/")
async def join_keys(view: View, request: Request, join: str) -> Response:
    """Every key with state of an event-time join, gathered from all workers, sorted."""
    if not isinstance(readers.get(join), EventTimeReader):
        return view.error(404, f"no event-time join {join!r}", join=join)
    answers = await gather(f"/timeline/api/joins/{join}/keys/local/", lambda: local_keys(join))
    keys = sorted({k for a in answers for k in a.get("keys", [])})
    return view.json(
        {"join": join, "keys": keys, "workers": _workers(answers, "keys")}, headers=NO_CACHE
    )


# -> {"join", "keys": [key, ...], "workers": {url: count | error}}

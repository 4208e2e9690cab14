"""The Confluent Schema Registry as etj uses it: writer schemas fetched by id, output schemas
registered, a registry that does not answer waited for
(docs/joins/declarative.md#schema-registry-formats).

Records of a side whose ``format`` is ``avro``, ``protobuf`` or ``json-sr`` (or whose
``key_format`` is ``avro``) carry Confluent's framing: a magic byte 0, the writer schema's id
(4 bytes, big-endian), then the payload. A worker fetches each id it has not seen
(``GET /schemas/ids/{id}``, Protobuf with ``?format=serialized``: a base64
``FileDescriptorProto``, its imports resolved through ``GET /subjects/{subject}/versions/
{version}``) **before** it parses the batch that holds it (:meth:`SchemaRegistry.prefetch`,
awaited by the loop's intake): parsing stays synchronous, a lookup in :attr:`SchemaRegistry.cache`
(bounded, least recently used dropped first: ``ETJ_SCHEMA_REGISTRY_CACHE``).

What an answer means:

- 200: the schema (:class:`Schema`), compiled once by :mod:`app.inputs.wire_formats`;
- 404 with Confluent's ``error_code`` 40403 (schema not found): :class:`Unknown`, so every record
  of that id is a dead letter naming it (asked again after :data:`UNKNOWN_TTL_S`: a follower
  registry may lag its leader);
- anything else (no connection, a timeout, 5xx, 401/403, a 404 that is not Confluent's): the
  registry **does not answer**. The batch waits, retried with a backoff up to
  :data:`MAX_BACKOFF_S`, counted in ``etj_schema_registry_waits`` and logged at most once a
  minute; its partitions stop being fetched while their inboxes are full (back pressure).
  A record is never dead-lettered because the registry is away.

No Faust: the ``archive`` command and the tests use it as the worker does. The HTTP client is
aiohttp's (Faust's own web server's), one session per call that needs the network: a fetch
happens once per schema id, and a session made in the running loop is never used from
another loop (the tests run several).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
from prometheus_client import Counter

from app.kafka.security import read_secret, ssl_context
from app.settings import Settings

__all__ = [
    "MAX_BACKOFF_S",
    "UNKNOWN_TTL_S",
    "RegistryRefused",
    "Schema",
    "SchemaRegistry",
    "Unknown",
    "registry_of",
    "shared_registry",
    "subject_of",
]

log = logging.getLogger(__name__)

#: the longest wait between two tries of a registry that does not answer
MAX_BACKOFF_S = 10.0
#: a registry's "not found" is asked again after this long
UNKNOWN_TTL_S = 60.0
#: how often a wait is logged at most
LOG_EVERY_S = 60.0

waits = Counter(
    "etj_schema_registry_waits",
    "Tries of the Schema Registry that got no usable answer (the batch waits: back pressure, "
    "never dead letters)",
)


@dataclass(eq=False)
class Schema:
    """A writer schema by id: its type (``AVRO``, ``PROTOBUF``, ``JSON``), its text (Protobuf:
    the base64 ``FileDescriptorProto``) and, for Protobuf, the files it imports (name, base64),
    each before the files that import it. ``compiled``: what a decoder made of it (per use)."""

    id: int
    type: str
    text: str
    references: tuple[tuple[str, str], ...] = ()
    compiled: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Unknown:
    """A schema id the registry does not know: its records are dead letters saying so."""

    id: int
    reason: str
    at: float


class RegistryRefused(RuntimeError):
    """The registry answered a registration with a refusal (an incompatible or invalid schema):
    the worker refuses to start, saying so."""


class _NoAnswer(Exception):
    """No usable answer: wait and try again."""


def subject_of(topic: str) -> str:
    """The value subject of a topic (Confluent's TopicNameStrategy)."""
    return f"{topic}-value"


class SchemaRegistry:
    """A registry's REST API (module docstring), with the cache of the schemas fetched."""

    def __init__(
        self,
        url: str,
        username: str | None = None,
        password: str | None = None,
        ssl: Any = None,
        capacity: int = 1_000,
        timeout_s: float = 10.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self.auth = aiohttp.BasicAuth(username, password or "") if username else None
        self.ssl = ssl
        self.capacity = capacity
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.sleep, self.clock = sleep, clock
        #: id -> its schema, or what the registry said of an id it does not know
        self.cache: OrderedDict[int, Schema | Unknown] = OrderedDict()
        #: (subject, schema text) -> the id it was registered with
        self.registered: dict[tuple[str, str], int] = {}
        self._logged = -LOG_EVERY_S

    # --- what a parser asks, synchronously -------------------------------------------------------
    def lookup(self, schema_id: int) -> Schema | Unknown | None:
        """The schema of an id fetched before (None: not fetched; the loop fetches every id of a
        batch before parsing it, so a parser sees None only outside the loop)."""
        got = self.cache.get(schema_id)
        if got is not None:
            self.cache.move_to_end(schema_id)
        return got

    def missing(self, ids: Iterable[int]) -> set[int]:
        """The ids of ``ids`` to fetch: not cached, or unknown long enough to ask again."""
        now = self.clock()
        out = set()
        for i in ids:
            got = self.cache.get(i)
            if got is None or (isinstance(got, Unknown) and now - got.at >= UNKNOWN_TTL_S):
                out.add(i)
        return out

    # --- fetching: awaited before a batch is parsed ----------------------------------------------
    async def prefetch_batches(
        self, framed: dict[str, tuple[str | None, str | None]], batches: Iterable[Any]
    ) -> None:
        """Fetch the schemas of every framed key and value of ``batches`` (each with a
        ``topic`` and ``records`` that have a ``key`` and a ``value``); ``framed``: topic ->
        (its keys' framed format, its values'), None where not framed."""
        ids: dict[int, str] = {}
        for b in batches:
            key_fmt, value_fmt = framed.get(b.topic, (None, None))
            if key_fmt is None and value_fmt is None:
                continue
            for r in b.records:
                for data, fmt in ((r.key, key_fmt), (r.value, value_fmt)):
                    if fmt is not None and data is not None and len(data) >= 5 and data[0] == 0:
                        ids.setdefault(int.from_bytes(data[1:5], "big"), fmt)
        if ids:
            await self.prefetch(ids.items())

    async def prefetch(self, ids: Iterable[tuple[int, str]]) -> None:
        """Fetch every schema of ``ids`` ((id, format the side reads it as)) not cached yet,
        waiting as long as the registry does not answer (module docstring)."""
        wanted = dict(ids)
        todo = self.missing(wanted)
        if not todo:
            for i in wanted:  # used: the least recently used go first
                self.cache.move_to_end(i)
            return
        got = await self._with_retries(
            lambda s: self._fetch_all(s, {i: wanted[i] for i in sorted(todo)}),
            f"schema id(s) {', '.join(map(str, sorted(todo)))}",
        )
        for entry in got:
            self.cache[entry.id] = entry
        for i in wanted:  # the batch's ids last: the least recently used go first
            if i in self.cache:
                self.cache.move_to_end(i)
        # bounded, but never below what one batch needs (its ids are parsed right after)
        while len(self.cache) > max(self.capacity, len(wanted)):
            self.cache.popitem(last=False)

    async def _fetch_all(
        self, session: aiohttp.ClientSession, todo: dict[int, str]
    ) -> list[Schema | Unknown]:
        return [await self._fetch(session, i, fmt) for i, fmt in todo.items()]

    async def _fetch(self, session: aiohttp.ClientSession, schema_id: int, fmt: str) -> Any:
        query = "?format=serialized" if fmt == "protobuf" else ""
        status, body = await self._get(session, f"/schemas/ids/{schema_id}{query}")
        if status == 404 and _error_code(body) == 40403:
            return Unknown(
                schema_id, f"unknown to the schema registry ({_message(body)})", self.clock()
            )
        if status != 200 or not isinstance(body, dict) or "schema" not in body:
            raise _NoAnswer(f"GET /schemas/ids/{schema_id}: HTTP {status} {_message(body)}")
        kind = str(body.get("schemaType") or "AVRO")
        refs: list[tuple[str, str]] = []
        if kind == "PROTOBUF":
            await self._references(session, body.get("references") or [], refs, set())
        return Schema(schema_id, kind, str(body["schema"]), tuple(refs))

    async def _references(
        self,
        session: aiohttp.ClientSession,
        references: list[dict[str, Any]],
        out: list[tuple[str, str]],
        seen: set[str],
    ) -> None:
        """Each file a Protobuf schema imports, the files they import first."""
        for ref in references:
            name = str(ref.get("name"))
            if name in seen:
                continue
            seen.add(name)
            path = (
                f"/subjects/{quote(str(ref.get('subject')), safe='')}/versions/{ref.get('version')}"
            )
            status, body = await self._get(session, path + "?format=serialized")
            if status != 200 or not isinstance(body, dict) or "schema" not in body:
                raise _NoAnswer(f"GET {path}: HTTP {status} {_message(body)}")
            await self._references(session, body.get("references") or [], out, seen)
            out.append((name, str(body["schema"])))

    # --- registering an output schema ----------------------------------------------------------
    async def register(self, subject: str, schema: str, kind: str) -> int:
        """The id of ``schema`` (type ``kind``: AVRO, JSON) registered under ``subject`` (an id
        it has already is returned as it is); waits while the registry does not answer, raises
        :class:`RegistryRefused` when it refuses the schema."""
        known = self.registered.get((subject, schema))
        if known is not None:
            return known
        body = {"schema": schema} if kind == "AVRO" else {"schema": schema, "schemaType": kind}

        async def post(session: aiohttp.ClientSession) -> int:
            url = f"{self.url}/subjects/{quote(subject, safe='')}/versions"
            try:
                async with session.post(url, json=body, **self._options()) as r:
                    status, answer = r.status, await _body(r)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise _NoAnswer(f"POST {url}: {exc!r}") from exc
            if status == 200 and isinstance(answer, dict) and "id" in answer:
                return int(answer["id"])
            if status in (409, 422):  # incompatible, or not a valid schema: an answer
                raise RegistryRefused(
                    f"the schema registry {self.url} refuses the {kind} schema of subject "
                    f"{subject!r}: HTTP {status} {_message(answer)}"
                )
            raise _NoAnswer(f"POST {url}: HTTP {status} {_message(answer)}")

        schema_id = await self._with_retries(post, f"the registration of subject {subject!r}")
        self.registered[(subject, schema)] = schema_id
        return schema_id

    # --- HTTP -----------------------------------------------------------------------------------
    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"timeout": self.timeout}
        if self.auth is not None:
            options["auth"] = self.auth
        if self.ssl is not None:
            options["ssl"] = self.ssl
        return options

    async def _get(self, session: aiohttp.ClientSession, path: str) -> tuple[int, Any]:
        url = self.url + path
        try:
            async with session.get(url, **self._options()) as r:
                return r.status, await _body(r)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _NoAnswer(f"GET {url}: {exc!r}") from exc

    async def _with_retries(
        self, call: Callable[[aiohttp.ClientSession], Awaitable[Any]], what: str
    ) -> Any:
        backoff = 0.25
        began = self.clock()
        while True:
            try:
                async with aiohttp.ClientSession(
                    headers={"Accept": "application/vnd.schemaregistry.v1+json"}
                ) as session:
                    return await call(session)
            except _NoAnswer as exc:
                waits.inc()
                now = self.clock()
                if now - self._logged >= LOG_EVERY_S:
                    self._logged = now
                    log.warning(
                        "schema registry %s does not answer (%s): waiting for %s for %.0f s so "
                        "far, retrying (back pressure: nothing is dead-lettered; logged at most "
                        "once a minute)",
                        self.url,
                        exc,
                        what,
                        now - began,
                    )
                await self.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)


async def _body(response: aiohttp.ClientResponse) -> Any:
    text = await response.text()
    try:
        return json.loads(text)
    except ValueError:
        return text[:200]


def _error_code(body: Any) -> int | None:
    code = body.get("error_code") if isinstance(body, dict) else None
    return code if isinstance(code, int) else None


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message", body))[:200]
    return str(body)[:200]


def registry_of(s: Settings) -> SchemaRegistry | None:
    """The registry of these settings (None: ``ETJ_SCHEMA_REGISTRY_URL`` unset); over https,
    the Kafka client's CA and client certificate when they are set
    (:func:`app.kafka.security.ssl_context`), else the system's CAs."""
    if not s.schema_registry_url:
        return None
    secure = s.schema_registry_url.startswith("https:")
    return SchemaRegistry(
        s.schema_registry_url,
        s.schema_registry_username,
        read_secret(s.schema_registry_password_file, s.schema_registry_password),
        ssl_context(s) if secure else None,
        s.schema_registry_cache,
    )


#: id(settings) -> (the settings, kept alive so that the id stays theirs, their registry)
_shared: dict[int, tuple[Settings, SchemaRegistry | None]] = {}


def shared_registry(s: Settings) -> SchemaRegistry | None:
    """One registry (and so one cache) per settings object: the worker's every parser and its
    intake share it."""
    if id(s) not in _shared:
        _shared[id(s)] = (s, registry_of(s))
    return _shared[id(s)][1]

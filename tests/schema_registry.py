"""A Schema Registry for the tests: the REST calls Confluent's clients make, on 127.0.0.1.

No registry server can be installed here (Confluent's is Java; Karapace is not on PyPI), so the
tests run this one, and produce with confluent-kafka's own serializers (``AvroSerializer``,
``ProtobufSerializer``, ``JSONSerializer``) through confluent-kafka's own
``SchemaRegistryClient``: the bytes on the wire are exactly a Confluent producer's, and etj's
client (:mod:`app.kafka.schema_registry`) is held to the same REST calls.

What it speaks (what ``SchemaRegistryClient`` calls when it serializes, deserializes and
registers; Confluent's answers and error codes):

- ``POST /subjects/{subject}/versions``: register (one id per distinct schema, as the real
  registry gives the same id to the same schema under any subject), ``{"id": …}``;
- ``POST /subjects/{subject}``: look a schema up under a subject (40401, 40403 when absent);
- ``GET /schemas/ids/{id}`` (``?format=serialized`` too: a Protobuf schema is kept as the Python
  serializer registers it, a base64 ``FileDescriptorProto``, so both forms are that), 40403
  when unknown;
- ``GET /subjects``, ``GET /subjects/{subject}/versions``,
  ``GET /subjects/{subject}/versions/{version|latest}``.

Optional basic auth (401 otherwise). :meth:`RegistryServer.pause` stops answering (the port is
closed: connections are refused, as a registry that is down) and :meth:`RegistryServer.resume`
answers again on the same port. It runs in a thread of its own, so that a test's synchronous
code and the worker processes it starts all reach it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from typing import Any

from aiohttp import web

from app.dev.local_broker import free_port

JSON_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryServer:
    """The registry (module docstring); a context manager: started, then stopped."""

    def __init__(self, username: str | None = None, password: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.credentials = (username, password) if username else None
        #: id -> {"schema", "schemaType", "references"}
        self.schemas: dict[int, dict[str, Any]] = {}
        #: subject -> [id of each version]
        self.subjects: dict[str, list[int]] = {}
        #: the requests answered, as "METHOD path"
        self.requests: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    # --- running --------------------------------------------------------------------------------
    def __enter__(self) -> RegistryServer:
        self._thread.start()
        self._call(self._start())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def pause(self) -> None:
        """Stop answering: the port is closed (a registry that is down)."""
        self._call(self._close_site())

    def resume(self) -> None:
        """Answer again, on the same port."""
        self._call(self._open_site())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        app.router.add_post("/subjects/{subject}/versions", self._register)
        app.router.add_post("/subjects/{subject}", self._lookup)
        app.router.add_get("/schemas/ids/{id}", self._by_id)
        app.router.add_get("/subjects", self._subjects)
        app.router.add_get("/subjects/{subject}/versions", self._versions)
        app.router.add_get("/subjects/{subject}/versions/{version}", self._version)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await self._open_site()

    async def _open_site(self) -> None:
        assert self._runner is not None
        if self._site is None:
            self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
            await self._site.start()

    async def _close_site(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def _stop(self) -> None:
        await self._close_site()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- registering, as a test does it directly ----------------------------------------------------
    def register(
        self, subject: str, schema: str, kind: str = "AVRO", references: list[Any] | None = None
    ) -> int:
        """Register ``schema`` under ``subject``; its id."""
        entry = {"schema": schema, "schemaType": kind, "references": references or []}
        for i, known in self.schemas.items():
            if known == entry:
                schema_id = i
                break
        else:
            schema_id = max(self.schemas, default=0) + 1
            self.schemas[schema_id] = entry
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    # --- the REST calls -------------------------------------------------------------------------
    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if request.headers.get("Authorization") != expected:
                return _error(401, 401, "Unauthorized")
        return await handler(request)

    def _answer(self, schema_id: int, subject: str | None = None) -> dict[str, Any]:
        entry = self.schemas[schema_id]
        out: dict[str, Any] = {"id": schema_id, "schema": entry["schema"]}
        if entry["schemaType"] != "AVRO":
            out["schemaType"] = entry["schemaType"]
        if entry["references"]:
            out["references"] = entry["references"]
        if subject is not None:
            out["subject"] = subject
            out["version"] = self.subjects[subject].index(schema_id) + 1
        return out

    async def _register(self, request: web.Request) -> web.Response:
        body = await request.json()
        schema_id = self.register(
            request.match_info["subject"],
            body["schema"],
            body.get("schemaType") or "AVRO",
            body.get("references"),
        )
        return _json({"id": schema_id})

    async def _lookup(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        body = await request.json()
        if subject not in self.subjects:
            return _error(404, 40401, f"Subject '{subject}' not found.")
        wanted = (body["schema"], body.get("schemaType") or "AVRO")
        for schema_id in self.subjects[subject]:
            entry = self.schemas[schema_id]
            if (entry["schema"], entry["schemaType"]) == wanted:
                return _json(self._answer(schema_id, subject))
        return _error(404, 40403, "Schema not found")

    async def _by_id(self, request: web.Request) -> web.Response:
        schema_id = int(request.match_info["id"])
        if schema_id not in self.schemas:
            return _error(404, 40403, f"Schema {schema_id} not found")
        return _json(self._answer(schema_id))

    async def _subjects(self, request: web.Request) -> web.Response:
        return _json(sorted(self.subjects))

    async def _versions(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        if subject not in self.subjects:
            return _error(404, 40401, f"Subject '{subject}' not found.")
        return _json(list(range(1, len(self.subjects[subject]) + 1)))

    async def _version(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        if subject not in self.subjects:
            return _error(404, 40401, f"Subject '{subject}' not found.")
        versions = self.subjects[subject]
        raw = request.match_info["version"]
        n = len(versions) if raw in ("latest", "-1") else int(raw)
        if not 1 <= n <= len(versions):
            return _error(404, 40402, f"Version {raw} not found.")
        return _json(self._answer(versions[n - 1], subject))


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type=JSON_TYPE)


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"error_code": code, "message": message}, status)


def proto_class(file: Any, message: str) -> Any:
    """The message class ``message`` (a full name) of a ``FileDescriptorProto`` made at test
    time (no ``protoc`` here), its imports of Google's well-known types added first: what
    ``ProtobufSerializer`` serializes, as a class compiled from a ``.proto`` file would be."""
    import importlib

    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for dep in file.dependency:
        module = importlib.import_module(dep.removesuffix(".proto").replace("/", ".") + "_pb2")
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(file.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))

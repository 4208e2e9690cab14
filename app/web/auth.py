"""Who may read the state views: an optional bearer token (docs/operating/security.md).

With ``ETJ_VIEWS_TOKEN_FILE`` (or ``ETJ_VIEWS_TOKEN``) set, every request to the web server
needs ``Authorization: Bearer <token>``, except what probes, scrapers and a browser's first
load need: ``/health/``, ``/ready/``, ``/metrics`` and the timeline page's shell and assets
(they hold no state; the page sends the token with each data request). Anything else, unknown
paths included, is a JSON 401 without it, before any routing or table read.

It is an aiohttp middleware, given to Faust through its ``web_application_options`` setting
(no patch) by :func:`install`, which :mod:`app.main` calls before the first route makes the web
server (``app.web``). A worker that forwards a request to the key's owner (:func:`app.web.views.forward`,
the timeline's peers) adds :func:`peer_headers`: the workers share the token.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from app.kafka.security import read_secret
from app.settings import Settings

#: paths answered without the token (exact), and prefixes (static assets of the timeline)
OPEN_PATHS = frozenset({"/health/", "/ready/", "/metrics", "/timeline/"})
OPEN_PREFIXES = ("/timeline/static/",)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_token: str | None = None


def views_token(s: Settings) -> str | None:
    """The token, read once at start; None: views open. An empty token is refused."""
    token = read_secret(s.views_token_file, s.views_token)
    if token is not None and not token.strip():
        raise ValueError("the views token (ETJ_VIEWS_TOKEN_FILE / ETJ_VIEWS_TOKEN) is empty")
    return token


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def _unauthorized() -> web.Response:
    body = json.dumps(
        {"error": "a bearer token is required: Authorization: Bearer <token>", "status": 401}
    )
    return web.Response(
        status=401,
        text=body,
        content_type="application/json",
        headers={"WWW-Authenticate": 'Bearer realm="etj"'},
    )


def middleware(token: str) -> Any:
    """The aiohttp middleware that requires ``Authorization: Bearer <token>``."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_open(request.path):
            return await handler(request)
        given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, expected):  # constant time: no timing oracle
            return _unauthorized()
        return await handler(request)

    return require_token


def web_application_options(s: Settings) -> dict[str, Any]:
    """Faust's ``web_application_options`` for these settings (the middleware, if a token)."""
    global _token
    _token = views_token(s)
    return {"middlewares": [middleware(_token)]} if _token is not None else {}


def install(app: Any) -> None:
    """Read the token (an empty one is refused) and give ``app``'s web server the middleware,
    if a token is set: before the web server's application is made (the first route makes
    it), which reads Faust's ``web_application_options`` once."""
    options = web_application_options(app.etj)
    if "web" in vars(app):  # made already: it would never see the middleware
        raise RuntimeError("app.web.auth.install(app) must run before the first route")
    if options:
        app.conf.web_application_options = options


def peer_headers() -> dict[str, str]:
    """Headers a worker adds when it asks another worker's views."""
    return {"Authorization": f"Bearer {_token}"} if _token is not None else {}

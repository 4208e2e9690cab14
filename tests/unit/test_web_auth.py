"""app.web.auth: the views' bearer token, on a bare aiohttp server (the real worker: tests/broker)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from app.settings import Settings
from app.web import auth as web_auth

PATHS = [
    "/health/",
    "/ready/",
    "/metrics",
    "/timeline/",
    "/timeline/static/timeline.js",
    "/moods/alice/",
    "/joins/",
    "/stats/",
    "/timeline/api/consultants/",
    "/nope",
]


async def client(token: str | None) -> TestClient:
    options = web_auth.web_application_options(
        Settings(_env_file=None, views_token=SecretStr(token) if token else None)
    )
    app = web.Application(**options)

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"path": request.path})

    for path in PATHS[:-1]:
        app.router.add_get(path, ok)
    c = TestClient(TestServer(app))
    await c.start_server()
    return c


async def test_without_a_token_setting_every_view_is_open():
    c = await client(None)
    try:
        for path in PATHS[:-1]:
            assert (await c.get(path)).status == 200, path
        assert web_auth.peer_headers() == {}
    finally:
        await c.close()


async def test_with_a_token_only_probes_metrics_and_the_page_shell_are_open():
    c = await client("s3cret")
    try:
        for path in PATHS:
            resp = await c.get(path)
            if web_auth.is_open(path):
                assert resp.status == 200, path
            else:
                assert resp.status == 401, path
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                assert "bearer token" in (await resp.json())["error"]
        for bad in [
            "Bearer wrong",
            "s3cret",
            "Bearer s3cret2",
            "bearer s3cret",
            "Basic czNjcmV0",
            "Bearer \u00e9\u00e9",
        ]:
            resp = await c.get("/moods/alice/", headers={"Authorization": bad})
            assert resp.status == 401, bad
        good = {"Authorization": "Bearer s3cret"}
        assert (await c.get("/moods/alice/", headers=good)).status == 200
        assert (await c.get("/nope", headers=good)).status == 404  # then routing as usual
        assert web_auth.peer_headers() == good  # what a worker sends when it forwards
    finally:
        await c.close()


def test_the_token_comes_from_its_file_first_and_an_empty_one_is_refused(tmp_path):
    f = tmp_path / "token"
    f.write_text("from-file\n")
    s = Settings(_env_file=None, views_token_file=f, views_token=SecretStr("env"))
    assert web_auth.views_token(s) == "from-file"
    f.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        web_auth.views_token(s)


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_the_worker_module_gives_its_web_server_the_middleware(token):
    """app.main installs it (app.web.auth.install) before the first route makes the server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETJ_VIEWS_TOKEN")}
    if token is not None:
        env["ETJ_VIEWS_TOKEN"] = token
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import app.main; from app.faust_app import app; "
            "print([m.__name__ for m in app.web.web_app.middlewares])",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert out.stdout.strip() == ("['require_token']" if token else "[]")

"""app.web.views.forward while the worker stops: a 503 to retry, never an HTML 500."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from yarl import URL

pytestmark = pytest.mark.unit


class FakeView:
    def error(self, status: int, message: str, **about: Any) -> tuple[int, str, dict[str, Any]]:
        return status, message, about


class ClosedClient:
    """aiohttp's ClientSession once closed: ``get`` raises RuntimeError."""

    def __init__(self, message: str) -> None:
        self.message = message

    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(self.message)


async def forward_with(client: Any) -> Any:
    # the views as the worker registers them (app.main: the bearer token before any route;
    # importing app.web.views first would make the web server without it)
    import app.main  # noqa: F401
    from app.web import views

    fake_app = SimpleNamespace(http_client=client, conf=SimpleNamespace(canonical_url="http://me"))
    request = SimpleNamespace(url=URL("http://me:6066/moods/ann/"), headers={})
    with mock.patch.object(views, "app", fake_app):
        return await views.forward(FakeView(), request, URL("http://owner:6066"))  # type: ignore[arg-type]


async def test_a_closed_http_client_answers_503_to_retry():
    status, message, about = await forward_with(ClosedClient("Session is closed"))
    assert status == 503 and "stopping" in message
    assert about == {"owner": "http://owner:6066"}


async def test_another_runtime_error_is_not_hidden():
    with pytest.raises(RuntimeError, match="something else"):
        await forward_with(ClosedClient("something else"))

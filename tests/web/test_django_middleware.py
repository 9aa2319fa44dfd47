"""The Django middleware: a CircuitOpenError raised in a view becomes the contract's 503.

Through Django's test clients (the sync and async handler stacks), then over real sockets: Django
served by uvicorn (ASGI) and by a threaded WSGI server.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from asgiref.sync import iscoroutinefunction
from django.core.asgi import get_asgi_application
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client, override_settings

from cascadebreaker import CircuitOpenError, State
from cascadebreaker.demo.topology import free_port
from cascadebreaker.integrations.django import CircuitOpenMiddleware, rejection_response

from . import middleware_views

pytestmark = pytest.mark.usefixtures("urls")

PATHS = ["/sync", "/async", "/deep", "/template"]


@pytest.fixture
def urls() -> Iterator[None]:
    middleware_views.breaker.reset()
    with override_settings(ROOT_URLCONF=middleware_views.__name__):
        yield
    middleware_views.breaker.reset()


def _open_for_real() -> None:
    """Open the breaker with a real failure (threshold 1), so retry-after is the full wait."""
    with pytest.raises(ConnectionError):
        middleware_views.breaker.call(_fail)


def _fail() -> None:
    raise ConnectionError("ledger down")


def assert_rejection(status: int, headers: Any, body: dict[str, Any]) -> None:
    assert status == 503
    assert headers["content-type"] == "application/json"
    assert headers["x-ccb-rejected"] == "ledger-api"
    assert 1 <= int(headers["retry-after"]) <= 30
    assert body["reasonCode"] == "circuit_open"
    assert (body["breaker"], body["circuitState"]) == ("ledger-api", "OPEN")
    assert 0 < body["retryAfter"] <= 30.0
    assert body["causeChain"] == [{"endpoint": "ledger-api * *", "reason": "circuit_open"}]


@pytest.mark.parametrize("path", PATHS)
def test_a_closed_breaker_lets_every_view_answer(path: str) -> None:
    response = Client().get(path)

    assert response.status_code == 200
    assert b"ok" in response.content


@pytest.mark.parametrize("path", PATHS)
def test_a_sync_handler_turns_a_rejection_into_503(path: str) -> None:
    _open_for_real()

    response = Client().get(path)

    assert_rejection(response.status_code, response.headers, response.json())


@pytest.mark.parametrize("path", PATHS)
async def test_an_async_handler_turns_a_rejection_into_503(path: str) -> None:
    _open_for_real()

    response = await AsyncClient().get(path)

    assert_rejection(response.status_code, response.headers, response.json())


def test_a_forced_open_breaker_has_no_retry_after() -> None:
    middleware_views.breaker.force_open()

    response = Client().get("/sync")

    assert response.status_code == 503
    assert "retry-after" not in response.headers
    assert response.json()["retryAfter"] is None


@pytest.mark.parametrize("path", ["/broken", "/async-broken"])
def test_other_exceptions_are_left_to_django(path: str) -> None:
    with pytest.raises(ValueError, match="a bug"):
        Client().get(path)
    response = Client(raise_request_exception=False).get(path)
    assert response.status_code == 500


def test_the_middleware_follows_the_mode_of_the_chain() -> None:
    def sync_next(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    async def async_next(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    outer_async = CircuitOpenMiddleware(CircuitOpenMiddleware(async_next))

    assert not iscoroutinefunction(CircuitOpenMiddleware(sync_next))
    assert iscoroutinefunction(outer_async)  # seen through another marked middleware too
    response = asyncio.run(outer_async(HttpRequest()))  # type: ignore[arg-type]
    assert response.status_code == 200


def test_rejection_response_rounds_retry_after_up() -> None:
    response = rejection_response(CircuitOpenError("ledger-api", State.OPEN, 0.2))

    assert (response.status_code, response["retry-after"]) == (503, "1")


# -- over real sockets ------------------------------------------------------------------------


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def wsgi_url() -> Iterator[str]:
    server = ThreadedWSGIServer(("127.0.0.1", 0), _Quiet)
    server.set_app(WSGIHandler())
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def asgi_url() -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(get_asgi_application(), host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.mark.parametrize("server", ["wsgi_url", "asgi_url"])
@pytest.mark.parametrize("path", ["/sync", "/async"])
def test_a_real_server_answers_503_and_serves_on(
    server: str, path: str, request: pytest.FixtureRequest
) -> None:
    base = request.getfixturevalue(server)
    with httpx.Client(base_url=base, trust_env=False, timeout=10.0) as http:
        assert http.get(path).status_code == 200
        _open_for_real()

        rejected = http.get(path)
        assert_rejection(rejected.status_code, rejected.headers, rejected.json())

        middleware_views.breaker.reset()
        assert http.get(path).status_code == 200  # the process lives on

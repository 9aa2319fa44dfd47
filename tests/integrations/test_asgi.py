"""CircuitOpenMiddleware: a real FastAPI app under uvicorn, and raw ASGI edge cases."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from cascadebreaker import CircuitOpenError, MemoryStore, State
from cascadebreaker.integrations.asgi import CircuitOpenMiddleware
from cascadebreaker.integrations.httpx_transport import AsyncBreakerTransport
from cascadebreaker.integrations.rejection import REJECTED_HEADER
from cascadebreaker.testing.ports import free_port

from .conftest import Upstream


def build_app(upstream: Upstream, store: MemoryStore) -> FastAPI:
    app = FastAPI()
    app.add_middleware(CircuitOpenMiddleware)

    @app.get("/checkout")
    async def checkout() -> dict[str, Any]:
        # A fresh client per request; the shared store keeps one breaker per upstream host.
        transport = AsyncBreakerTransport(store=store, failure_threshold=1, recovery_timeout=30)
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.get(upstream.url("/status/502"))
        return {"upstream_status": response.status_code}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


@pytest.fixture
def served(upstream: Upstream) -> Iterator[tuple[str, MemoryStore]]:
    """The app under a real uvicorn server on a free loopback port."""
    store = MemoryStore()
    port = free_port()
    config = uvicorn.Config(
        build_app(upstream, store), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}", store
    server.should_exit = True
    thread.join(timeout=10)


def test_open_circuit_in_an_endpoint_becomes_a_503(
    served: tuple[str, MemoryStore], upstream: Upstream
) -> None:
    base, store = served
    with httpx.Client(base_url=base) as client:
        first = client.get("/checkout")
        assert first.status_code == 200
        assert first.json() == {"upstream_status": 502}
        rejected = client.get("/checkout")
        assert client.get("/health").status_code == 200  # other routes are unaffected
    assert rejected.status_code == 503
    assert rejected.headers[REJECTED_HEADER] == upstream.netloc
    assert 1 <= int(rejected.headers["retry-after"]) <= 30
    assert rejected.json()["circuitState"] == "OPEN"
    assert upstream.hits == 1  # the second checkout never reached the upstream
    assert store.names() == [upstream.netloc]


def raw_app_raising(exc: BaseException, *, after_start: bool = False) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if after_start:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        raise exc

    return app


async def test_rejection_after_the_response_started_propagates() -> None:
    error = CircuitOpenError("late", State.OPEN, 3.0)
    app = CircuitOpenMiddleware(raw_app_raising(error, after_start=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
        with pytest.raises(CircuitOpenError):
            await c.get("/")


async def test_forced_open_answer_has_no_retry_after() -> None:
    app = CircuitOpenMiddleware(
        raw_app_raising(CircuitOpenError("pinned", State.OPEN, float("inf"), "forced_open"))
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
        response = await c.get("/")
    assert response.status_code == 503
    assert "retry-after" not in response.headers
    assert response.json() == {
        "error": "circuit OPEN",
        "reasonCode": "forced_open",
        "circuitState": "OPEN",
        "retryAfter": None,
        "causeChain": [{"endpoint": "pinned * *", "reason": "forced_open"}],
        "breaker": "pinned",
        "trippedBy": "forced_open",
        "scope": "local",
    }


async def test_other_exceptions_pass_through() -> None:
    app = CircuitOpenMiddleware(raw_app_raising(ValueError("bug")))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
        with pytest.raises(ValueError, match="bug"):
            await c.get("/")


async def test_non_http_scopes_are_passed_through() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    await CircuitOpenMiddleware(app)({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == ["lifespan"]

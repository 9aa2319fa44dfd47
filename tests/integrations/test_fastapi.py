"""The FastAPI dependency and exception handler under a real uvicorn server."""

from __future__ import annotations

import httpx
import pytest
from fastapi import Depends, FastAPI, HTTPException

from cascadebreaker import CircuitBreaker, State
from cascadebreaker.integrations.fastapi import breaker_guard, install

from .conftest import FakeClock, serve_asgi


def build_app(looked: CircuitBreaker, recorded: CircuitBreaker) -> tuple[FastAPI, list[str]]:
    app = install(FastAPI())
    ran: list[str] = []

    @app.get("/quote", dependencies=[Depends(breaker_guard(looked))])
    async def quote() -> dict[str, str]:
        ran.append("quote")
        return {"ok": "yes"}

    @app.get("/charge/{code}", dependencies=[Depends(breaker_guard(recorded, record=True))])
    async def charge(code: int) -> dict[str, int]:
        ran.append(f"charge {code}")
        if code >= 400:
            raise HTTPException(code, "upstream said no")
        return {"code": code}

    return app, ran


def test_guard_refuses_before_the_body_while_open(clock: FakeClock) -> None:
    looked = CircuitBreaker("pricing", failure_threshold=1, recovery_timeout=3, clock=clock)
    app, ran = build_app(looked, CircuitBreaker("unused"))
    with serve_asgi(app) as url:
        assert httpx.get(f"{url}/quote").status_code == 200
        looked.acquire().failure()
        response = httpx.get(f"{url}/quote")
        assert response.status_code == 503
        assert response.headers["retry-after"] == "3"
        assert response.json()["breaker"] == "pricing"
        assert ran == ["quote"]  # the body never ran while OPEN
        clock.advance(3)
        assert httpx.get(f"{url}/quote").status_code == 200  # wait over: the body may probe
    assert looked.snapshot()["calls"]["rejected"] == 0  # looking records nothing


def test_recording_guard_counts_5xx_not_4xx(clock: FakeClock) -> None:
    recorded = CircuitBreaker("payment", failure_threshold=2, recovery_timeout=5, clock=clock)
    app, ran = build_app(CircuitBreaker("unused"), recorded)
    with serve_asgi(app) as url:
        for _ in range(3):
            assert httpx.get(f"{url}/charge/404").status_code == 404
        assert recorded.state is State.CLOSED
        assert httpx.get(f"{url}/charge/200").status_code == 200
        assert httpx.get(f"{url}/charge/502").status_code == 502
        assert httpx.get(f"{url}/charge/503").status_code == 503
        assert recorded.state is State.OPEN
        refused = httpx.get(f"{url}/charge/200")
        assert refused.status_code == 503 and refused.json()["reasonCode"] == "circuit_open"
    assert ran.count("charge 200") == 1
    assert recorded.snapshot()["calls"] == {
        "success": 4,
        "failure": 2,
        "ignored": 0,
        "rejected": 1,
    }


def test_guard_needs_a_breaker() -> None:
    with pytest.raises(ValueError, match="CircuitBreaker"):
        breaker_guard("payment")  # type: ignore[arg-type]

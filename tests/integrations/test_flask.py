"""The Flask extension under werkzeug's real server: a rejection in a view is the JSON 503."""

from __future__ import annotations

import flask
import httpx

from cascadebreaker import CircuitBreaker
from cascadebreaker.integrations.flask import CircuitBreakerExtension
from cascadebreaker.integrations.rejection import REJECTED_HEADER

from .conftest import FakeClock, serve_wsgi


def build_app(breaker: CircuitBreaker) -> flask.Flask:
    app = flask.Flask("shop")
    CircuitBreakerExtension(app)

    @app.get("/quote")
    def quote() -> dict[str, int]:
        return {"price": breaker.call(lambda: 42)}

    @app.get("/boom")
    def boom() -> str:
        raise KeyError("a bug, not a rejection")

    return app


def test_a_rejection_in_a_view_is_a_503_with_retry_after(clock: FakeClock) -> None:
    breaker = CircuitBreaker("pricing", failure_threshold=1, recovery_timeout=7.2, clock=clock)
    app = build_app(breaker)
    assert app.extensions["cascadebreaker"]
    with serve_wsgi(app) as url:
        assert httpx.get(f"{url}/quote").json() == {"price": 42}
        breaker.acquire().failure()
        response = httpx.get(f"{url}/quote")
        assert response.status_code == 503
        assert response.headers["retry-after"] == "8"
        assert response.headers[REJECTED_HEADER] == "pricing"
        assert response.json() == {
            "error": "circuit OPEN",
            "reasonCode": "circuit_open",
            "circuitState": "OPEN",
            "retryAfter": 7.2,
            "causeChain": [{"endpoint": "pricing * *", "reason": "circuit_open"}],
            "breaker": "pricing",
            "trippedBy": "consecutive_failures",
            "scope": "local",
        }
        assert httpx.get(f"{url}/boom").status_code == 500  # other errors are Flask's


def test_init_app_in_a_factory() -> None:
    ext = CircuitBreakerExtension()
    breaker = CircuitBreaker("factory")
    breaker.force_open()
    app = build_app(breaker)
    ext.init_app(app)
    with serve_wsgi(app) as url:
        response = httpx.get(f"{url}/quote")
    assert response.status_code == 503
    assert "retry-after" not in response.headers  # forced open: no time to promise

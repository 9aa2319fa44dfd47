"""FastAPI: a `Depends(breaker_guard(...))` dependency and a CircuitOpenError exception handler.

    from cascadebreaker.integrations.fastapi import breaker_guard, install

    install(app)                                         # CircuitOpenError -> JSON 503

    @app.get("/quote", dependencies=[Depends(breaker_guard(payments))])
    async def quote(): ...                               # refused at once while payments is OPEN

`breaker_guard(b)` only looks: while the circuit is OPEN the route answers 503 before its body
runs, and nothing is recorded (the body's own calls through `b` record their outcomes).
`breaker_guard(b, record=True)` makes the route itself the guarded call: it takes a permit
(a half-open probe slot included), an exception from the body counts as the breaker's
classifier says, an `HTTPException` below 500 is a success, and a response is a success.
The handler sends the body and headers every surface sends (`integrations.rejection`); the
ASGI middleware (`integrations.asgi`) does the same for apps that are not FastAPI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response

from ..breaker import CircuitBreaker
from ..core.state import State
from ..errors import CircuitOpenError
from .rejection import rejection_body, rejection_headers

__all__ = ["breaker_guard", "circuit_open_handler", "install"]


async def circuit_open_handler(request: Request, exc: Exception) -> Response:
    """The exception handler: the JSON 503 with `retry-after` for a CircuitOpenError."""
    if not isinstance(exc, CircuitOpenError):  # registered for CircuitOpenError only
        raise exc
    return Response(rejection_body(exc), status_code=503, headers=rejection_headers(exc))


def install(app: FastAPI) -> FastAPI:
    """Register `circuit_open_handler` for CircuitOpenError on `app`; returns the app."""
    app.add_exception_handler(CircuitOpenError, circuit_open_handler)
    return app


def breaker_guard(breaker: CircuitBreaker, *, record: bool = False) -> Callable[..., Any]:
    """A dependency that refuses the route while `breaker` is OPEN (see the module doc)."""
    if not isinstance(breaker, CircuitBreaker):
        raise ValueError(f"breaker_guard needs a CircuitBreaker, got {breaker!r}")

    if not record:

        async def look() -> None:
            if breaker.state is State.OPEN and breaker.retry_after > 0:
                raise CircuitOpenError(breaker.name, breaker.state, breaker.retry_after)

        return look

    async def guarded_call() -> AsyncIterator[None]:
        permit = await breaker.aacquire()
        try:
            yield
        except HTTPException as exc:
            permit.success() if exc.status_code < 500 else permit.failure(exc)
            raise
        except BaseException as exc:
            permit.failure(exc)
            raise
        permit.success()

    return guarded_call

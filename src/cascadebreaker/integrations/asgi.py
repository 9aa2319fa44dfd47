"""ASGI middleware: a `CircuitOpenError` escaping the app becomes a 503 with `retry-after`.

    app.add_middleware(CircuitOpenMiddleware)         # FastAPI / Starlette
    app = CircuitOpenMiddleware(app)                  # any ASGI app

An endpoint that calls an upstream through a breaker (directly, or via the httpx transport) can
let the rejection propagate: the client gets the same 503 + JSON body as the httpx transport's
`on_open="respond"` gives, instead of a 500. No dependency beyond the ASGI spec.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..errors import CircuitOpenError
from .rejection import rejection_body, rejection_headers

__all__ = ["CircuitOpenMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class CircuitOpenMiddleware:
    """Turn a CircuitOpenError raised before the response started into a 503 response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; answer 503 if a breaker rejected the work before any byte was sent."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except CircuitOpenError as error:
            if started:  # too late for a status code: let the server abort the response
                raise
            await _send_rejection(send, error)


async def _send_rejection(send: Send, error: CircuitOpenError) -> None:
    body = rejection_body(error)
    headers = rejection_headers(error)
    headers["content-length"] = str(len(body))
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        }
    )
    await send({"type": "http.response.body", "body": body})

"""httpx transports that put a circuit breaker in front of any inner transport.

    client = httpx.Client(transport=BreakerTransport(failure_threshold=5, recovery_timeout=20))
    async_client = httpx.AsyncClient(transport=AsyncBreakerTransport())

One breaker per host (`host[:port]`) by default, created on first use from the given breaker
settings and sharing one store; or one per `key(request)`; or one fixed `breaker` for everything.

What counts:
- a response whose status is in `failure_statuses` (default 500-599) is a failure; any other
  response (4xx included) is a success;
- connect errors, timeouts, network and remote-protocol errors are failures (the breaker's own
  classifier still has the last word, e.g. `ignore_exceptions`);
- other exceptions (a malformed request, an unsupported scheme, cancellation) are the caller's,
  not the upstream's: the call is ignored and the exception propagates unchanged.

The outcome is recorded when the response *headers* arrive: a streamed body that later fails is
not counted, and a long-lived stream does not hold a half-open probe slot.

A rejected request raises `CircuitOpenError` (not an httpx exception; the request never left), or,
with `on_open="respond"`, returns a synthetic 503 response with `retry-after` and a JSON body.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

import httpx

from ..breaker import CircuitBreaker
from ..errors import CircuitOpenError
from ..stores.base import Store
from .rejection import REJECTED_HEADER, rejection_body, rejection_headers
from .routing import BreakerFactory, BreakerRouter

__all__ = [
    "REJECTED_HEADER",
    "UPSTREAM_FAILURES",
    "AsyncBreakerTransport",
    "BreakerFactory",
    "BreakerTransport",
    "OnOpen",
    "RequestKey",
    "host_key",
]

RequestKey = Callable[[httpx.Request], str]
OnOpen = Literal["raise", "respond"]

# Exceptions that say the upstream (or the path to it) is unhealthy.
UPSTREAM_FAILURES: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
)


def host_key(request: httpx.Request) -> str:
    """Default breaker key: the request's host, with the port when one is given."""
    return request.url.netloc.decode("ascii")


class _BreakerRouting(BreakerRouter[httpx.Request]):
    """The router over httpx requests, plus the `on_open` answer; shared by both twins."""

    def __init__(
        self,
        *,
        key: RequestKey | None,
        breaker: CircuitBreaker | None,
        breaker_factory: BreakerFactory | None,
        store: Store | None,
        breaker_settings: Mapping[str, Any],
        failure_statuses: Collection[int],
        failure_exceptions: tuple[type[BaseException], ...],
        on_open: OnOpen,
        on_new_breaker: Callable[[CircuitBreaker], None] | None,
    ) -> None:
        if on_open not in ("raise", "respond"):
            raise ValueError(f"on_open must be 'raise' or 'respond', got {on_open!r}")
        super().__init__(
            key=key or host_key,
            custom_key=key is not None,
            breaker=breaker,
            breaker_factory=breaker_factory,
            store=store,
            breaker_settings=breaker_settings,
            failure_statuses=failure_statuses,
            failure_exceptions=failure_exceptions,
            on_new_breaker=on_new_breaker,
        )
        self._respond = on_open == "respond"

    def _rejected(self, request: httpx.Request, error: CircuitOpenError) -> httpx.Response:
        if not self._respond:
            raise error
        return httpx.Response(
            503, headers=rejection_headers(error), content=rejection_body(error), request=request
        )


class BreakerTransport(_BreakerRouting, httpx.BaseTransport):
    """A sync httpx transport that routes every request through a circuit breaker."""

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        key: RequestKey | None = None,
        breaker: CircuitBreaker | None = None,
        breaker_factory: BreakerFactory | None = None,
        store: Store | None = None,
        failure_statuses: Collection[int] = range(500, 600),
        failure_exceptions: tuple[type[BaseException], ...] = UPSTREAM_FAILURES,
        on_open: OnOpen = "raise",
        on_new_breaker: Callable[[CircuitBreaker], None] | None = None,
        **breaker_settings: Any,
    ) -> None:
        super().__init__(
            key=key,
            breaker=breaker,
            breaker_factory=breaker_factory,
            store=store,
            breaker_settings=breaker_settings,
            failure_statuses=failure_statuses,
            failure_exceptions=failure_exceptions,
            on_open=on_open,
            on_new_breaker=on_new_breaker,
        )
        self.transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the inner transport unless its breaker rejects it."""
        try:
            permit = self.breaker_for(request).acquire()
        except CircuitOpenError as error:
            return self._rejected(request, error)
        try:
            response = self.transport.handle_request(request)
        except BaseException as exc:
            self.settle_error(permit, exc)
            raise
        self.settle_status(permit, response.status_code)
        return response

    def close(self) -> None:
        """Close the inner transport."""
        self.transport.close()


class AsyncBreakerTransport(_BreakerRouting, httpx.AsyncBaseTransport):
    """An async httpx transport that routes every request through a circuit breaker."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        key: RequestKey | None = None,
        breaker: CircuitBreaker | None = None,
        breaker_factory: BreakerFactory | None = None,
        store: Store | None = None,
        failure_statuses: Collection[int] = range(500, 600),
        failure_exceptions: tuple[type[BaseException], ...] = UPSTREAM_FAILURES,
        on_open: OnOpen = "raise",
        on_new_breaker: Callable[[CircuitBreaker], None] | None = None,
        **breaker_settings: Any,
    ) -> None:
        super().__init__(
            key=key,
            breaker=breaker,
            breaker_factory=breaker_factory,
            store=store,
            breaker_settings=breaker_settings,
            failure_statuses=failure_statuses,
            failure_exceptions=failure_exceptions,
            on_open=on_open,
            on_new_breaker=on_new_breaker,
        )
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the inner transport unless its breaker rejects it."""
        try:
            permit = await self.breaker_for(request).aacquire()
        except CircuitOpenError as error:
            return self._rejected(request, error)
        try:
            response = await self.transport.handle_async_request(request)
        except BaseException as exc:  # cancellation included: it releases a probe slot
            self.settle_error(permit, exc)
            raise
        self.settle_status(permit, response.status_code)
        return response

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.transport.aclose()

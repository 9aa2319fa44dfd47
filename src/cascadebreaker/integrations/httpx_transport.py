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

import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

import httpx

from ..breaker import CircuitBreaker
from ..errors import CircuitOpenError
from ..permit import Permit
from ..stores.base import Store
from ..stores.memory import MemoryStore
from .rejection import REJECTED_HEADER, rejection_body, rejection_headers

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
BreakerFactory = Callable[[str], CircuitBreaker]
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


class _BreakerRouting:
    """Picks (and lazily creates) the breaker for a request; shared by the sync and async twins."""

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
        if breaker is not None and (key is not None or breaker_factory is not None):
            raise ValueError("breaker cannot be combined with key or breaker_factory")
        if breaker_factory is not None and (store is not None or breaker_settings):
            raise ValueError("breaker_factory cannot be combined with store or breaker settings")
        if key is not None and not callable(key):
            raise ValueError(f"key must be a callable taking a request, got {key!r}")
        if not all(isinstance(s, int) and 100 <= s <= 599 for s in failure_statuses):
            raise ValueError(f"failure_statuses must be HTTP status codes: {failure_statuses!r}")
        if not isinstance(failure_exceptions, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in failure_exceptions
        ):
            raise ValueError(
                f"failure_exceptions must be a tuple of exception types: {failure_exceptions!r}"
            )
        self._key = key or host_key
        self._fixed = breaker
        self._store = store if store is not None else MemoryStore()
        self._settings = dict(breaker_settings)
        self._factory = breaker_factory or self._build
        if breaker_factory is None and breaker is None:
            # Invalid settings fail here with the breaker's ValueError, not on the first request.
            CircuitBreaker("settings-check", store=MemoryStore(), **self._settings)
        self._failure_statuses = frozenset(failure_statuses)
        self._failure_exceptions = failure_exceptions
        self._respond = on_open == "respond"
        self._on_new = on_new_breaker
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()
        if breaker is not None:
            self._remember(breaker.name, breaker)

    def _build(self, name: str) -> CircuitBreaker:
        return CircuitBreaker(name, store=self._store, **self._settings)

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        """The breakers created so far, by key."""
        with self._lock:
            return dict(self._breakers)

    def breaker_for(self, request: httpx.Request) -> CircuitBreaker:
        """The breaker guarding `request`, created on first use."""
        if self._fixed is not None:
            return self._fixed
        name = self._key(request)
        found = self._breakers.get(name)  # dict reads are atomic; lock only to create
        if found is not None:
            return found
        with self._lock:
            found = self._breakers.get(name)
            if found is None:
                found = self._factory(name)
                self._breakers[name] = found
                created = True
            else:
                created = False
        if created and self._on_new is not None:
            self._on_new(found)
        return found

    def _remember(self, name: str, breaker: CircuitBreaker) -> None:
        self._breakers[name] = breaker
        if self._on_new is not None:
            self._on_new(breaker)

    def _settle(self, permit: Permit, response: httpx.Response) -> None:
        if response.status_code in self._failure_statuses:
            permit.failure()
        else:
            permit.success()

    def _settle_error(self, permit: Permit, exc: BaseException) -> None:
        if isinstance(exc, self._failure_exceptions):
            permit.failure(exc)
        else:
            permit.ignore()

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
            self._settle_error(permit, exc)
            raise
        self._settle(permit, response)
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
            self._settle_error(permit, exc)
            raise
        self._settle(permit, response)
        return response

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.transport.aclose()

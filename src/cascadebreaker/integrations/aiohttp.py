"""aiohttp client: a breaker per host as a client middleware (aiohttp >= 3.12) or a TraceConfig.

    breakers = BreakerMiddleware(failure_threshold=5, recovery_timeout=20)
    async with aiohttp.ClientSession(middlewares=(breakers,)) as session: ...

    # aiohttp older than 3.12 (no client middlewares): the trace-config fallback
    async with aiohttp.ClientSession(trace_configs=[breaker_trace_config(breakers)]) as s: ...

What counts (as in the httpx and requests integrations): a status in `failure_statuses`
(default 500-599) is a failure, any other response (4xx included) a success; connection
errors, timeouts and broken payloads are failures; other exceptions are ignored. The outcome
is recorded when the response headers arrive. A rejected request raises `CircuitOpenError`
before a connection is taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from types import SimpleNamespace
from typing import Any

import aiohttp
from yarl import URL

from ..breaker import CircuitBreaker
from ..stores.base import Store
from .routing import BreakerFactory, BreakerRouter, route_name

__all__ = [
    "UPSTREAM_FAILURES",
    "BreakerMiddleware",
    "breaker_trace_config",
    "host_key",
    "route_key",
]

# Exceptions that say the upstream (or the path to it) is unhealthy.
UPSTREAM_FAILURES: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectionError,  # refused, reset, disconnected, socket timeouts
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,  # the session's total timeout
)


def _host(url: URL) -> str:
    return f"{url.host}:{url.explicit_port}" if url.explicit_port else str(url.host)


def host_key(method: str, url: URL) -> str:
    """Default breaker key: `host` or `host:port` of the request's URL."""
    return _host(url)


def route_key(method: str, url: URL) -> str:
    """Per-route key: `host METHOD /path/{id}` (numeric, UUID and long-hex segments fold)."""
    return route_name(_host(url), method, url.path or "/")


class BreakerMiddleware:
    """A client middleware (aiohttp >= 3.12) routing every request through its host's breaker."""

    def __init__(
        self,
        *,
        key: Callable[[str, URL], str] | None = None,
        breaker: CircuitBreaker | None = None,
        breaker_factory: BreakerFactory | None = None,
        store: Store | None = None,
        failure_statuses: Collection[int] = range(500, 600),
        failure_exceptions: tuple[type[BaseException], ...] = UPSTREAM_FAILURES,
        on_new_breaker: Callable[[CircuitBreaker], None] | None = None,
        **breaker_settings: Any,
    ) -> None:
        chosen = key or host_key
        self.router: BreakerRouter[tuple[str, URL]] = BreakerRouter(
            key=lambda request: chosen(*request),
            custom_key=key is not None,
            breaker=breaker,
            breaker_factory=breaker_factory,
            store=store,
            breaker_settings=breaker_settings,
            failure_statuses=failure_statuses,
            failure_exceptions=failure_exceptions,
            on_new_breaker=on_new_breaker,
        )

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        """The breakers created so far, by key."""
        return self.router.breakers

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """Send `request` unless its breaker rejects it (CircuitOpenError, nothing sent)."""
        permit = await self.router.breaker_for((request.method, request.url)).aacquire()
        try:
            response = await handler(request)
        except BaseException as exc:  # cancellation included: it gives a probe slot back
            self.router.settle_error(permit, exc)
            raise
        self.router.settle_status(permit, response.status)
        return response


def breaker_trace_config(breakers: BreakerMiddleware) -> aiohttp.TraceConfig:
    """The same breakers as trace hooks, for aiohttp versions without client middlewares.

    A rejection raised from `on_request_start` propagates to the caller before a connection
    is made; the permit rides in the request's trace context until the headers or an error.
    """
    router = breakers.router
    config = aiohttp.TraceConfig()

    async def start(_: Any, ctx: SimpleNamespace, params: aiohttp.TraceRequestStartParams) -> None:
        ctx.ccb_permit = await router.breaker_for((params.method, params.url)).aacquire()

    async def end(_: Any, ctx: SimpleNamespace, params: aiohttp.TraceRequestEndParams) -> None:
        permit = getattr(ctx, "ccb_permit", None)
        if permit is not None:
            router.settle_status(permit, params.response.status)

    async def error(
        _: Any, ctx: SimpleNamespace, params: aiohttp.TraceRequestExceptionParams
    ) -> None:
        permit = getattr(ctx, "ccb_permit", None)
        if permit is not None:
            router.settle_error(permit, params.exception)

    config.on_request_start.append(start)
    config.on_request_end.append(end)
    config.on_request_exception.append(error)
    config.freeze()
    return config

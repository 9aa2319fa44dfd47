"""A requests `HTTPAdapter` with a circuit breaker per host or per route (the `requests` extra).

    session = requests.Session()
    adapter = BreakerAdapter(failure_threshold=5, recovery_timeout=20)
    session.mount("http://", adapter)
    session.mount("https://", adapter)

What counts (as in the httpx transport): a status in `failure_statuses` (default 500-599) is a
failure, any other response (4xx included) a success; connection errors, timeouts and broken
responses are failures; other exceptions (an invalid URL, a missing schema) are ignored.
A rejected request raises `CircuitOpenError` before a connection is taken from the pool.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from ..breaker import CircuitBreaker
from ..stores.base import Store
from .routing import BreakerFactory, BreakerRouter, route_name

__all__ = ["UPSTREAM_FAILURES", "BreakerAdapter", "host_key", "route_key"]

RequestKey = Callable[[requests.PreparedRequest], str]

# Exceptions that say the upstream (or the path to it) is unhealthy.
UPSTREAM_FAILURES: tuple[type[Exception], ...] = (
    requests.ConnectionError,  # refused, reset, DNS, proxy and SSL errors; ConnectTimeout too
    requests.Timeout,  # read timeouts
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
)


def host_key(request: requests.PreparedRequest) -> str:
    """Default breaker key: `host` or `host:port` of the request's URL."""
    return urlsplit(request.url or "").netloc


def route_key(request: requests.PreparedRequest) -> str:
    """Per-route key: `host METHOD /path/{id}` (numeric, UUID and long-hex segments fold)."""
    url = urlsplit(request.url or "")
    return route_name(url.netloc, request.method or "GET", url.path or "/")


class BreakerAdapter(HTTPAdapter):
    """An HTTPAdapter that sends every request through the breaker of its host (or `key`)."""

    def __init__(
        self,
        *,
        key: RequestKey | None = None,
        breaker: CircuitBreaker | None = None,
        breaker_factory: BreakerFactory | None = None,
        store: Store | None = None,
        failure_statuses: Collection[int] = range(500, 600),
        failure_exceptions: tuple[type[BaseException], ...] = UPSTREAM_FAILURES,
        on_new_breaker: Callable[[CircuitBreaker], None] | None = None,
        adapter_settings: Mapping[str, Any] | None = None,
        **breaker_settings: Any,
    ) -> None:
        self.router: BreakerRouter[requests.PreparedRequest] = BreakerRouter(
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
        super().__init__(**dict(adapter_settings or {}))

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        """The breakers created so far, by key."""
        return self.router.breakers

    def send(
        self, request: requests.PreparedRequest, *args: Any, **kwargs: Any
    ) -> requests.Response:
        """Send `request` unless its breaker rejects it (CircuitOpenError, no socket opened)."""
        permit = self.router.breaker_for(request).acquire()
        try:
            response = super().send(request, *args, **kwargs)
        except BaseException as exc:
            self.router.settle_error(permit, exc)
            raise
        self.router.settle_status(permit, response.status_code)
        return response

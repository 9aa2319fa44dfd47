"""Where the report page gets settlements: the settlement API, through one circuit breaker."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx

from cascadebreaker import CircuitBreaker
from cascadebreaker.integrations.inertia import GuardedProp, StaleCache, guarded_prop

# The inbound request's W3C traceparent: the settlement call carries a child of it, so a sidecar
# in front of the page can tell which page request a failed call belonged to.
current_traceparent: ContextVar[str | None] = ContextVar("current_traceparent", default=None)


def trace_context_middleware(get_response: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Django middleware: remember the request's `traceparent` while it is served."""

    def middleware(request: Any) -> Any:
        token = current_traceparent.set(request.META.get("HTTP_TRACEPARENT"))
        try:
            return get_response(request)
        finally:
            current_traceparent.reset(token)

    return middleware


def _child_headers() -> dict[str, str]:
    parent = current_traceparent.get()
    parts = parent.split("-") if parent else []
    if len(parts) != 4 or len(parts[1]) != 32:
        return {}
    return {"traceparent": f"00-{parts[1]}-{os.urandom(8).hex()}-{parts[3]}"}


@dataclass(frozen=True)
class SourceConfig:
    """How the page reaches the settlement API: base URL (maybe a proxy), timeout, breaker."""

    settlement_url: str
    call_timeout: float = 2.0
    failure_threshold: int = 3
    recovery_timeout: float = 10.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly form (Django settings carry it)."""
        return {
            "settlement_url": self.settlement_url,
            "call_timeout": self.call_timeout,
            "failure_threshold": self.failure_threshold,
            "recovery_timeout": self.recovery_timeout,
        }


def upstream_failed(exc: BaseException) -> bool:
    """Timeouts, network errors, 5xx and unreadable bodies count against the API; a 4xx is this
    app's own bug (raised to the caller, not counted)."""
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError | httpx.DecodingError | ValueError | KeyError)


class SettlementSource:
    """The settlement API client, its breaker and the last good settlements of each day."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.breaker = CircuitBreaker(
            "settlement-api",
            failure_threshold=config.failure_threshold,
            recovery_timeout=config.recovery_timeout,
            is_failure=upstream_failed,
        )
        self.last_good = StaleCache(max_entries=64)
        # trust_env=False: a proxy configured in the environment must not hijack loopback calls.
        self.client = httpx.Client(
            base_url=config.settlement_url, timeout=config.call_timeout, trust_env=False
        )

    def fetch(self, day: datetime.date) -> list[dict[str, Any]]:
        """The day's settlements from the API; raises on a timeout, a network error or a 5xx."""
        response = self.client.get(
            "/v1/settlements", params={"day": day.isoformat()}, headers=_child_headers()
        )
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()["settlements"]
        return rows

    def prop(self, day: datetime.date) -> GuardedProp[list[dict[str, Any]]]:
        """The page's `settlements` prop for `day`: guarded, with the day's last good value."""
        return guarded_prop(self.breaker, lambda: self.fetch(day), stale=self.last_good, key=day)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

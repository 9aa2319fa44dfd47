"""Which breaker guards a request: one per key (host, route, ...), built lazily, shared store.

The client integrations (httpx, requests, aiohttp) share this: each passes its own request type
and key function; the router validates the settings once and hands out breakers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any, Generic, TypeVar

from ..breaker import CircuitBreaker
from ..cascade.endpoints import fold_path
from ..permit import Permit
from ..stores.base import Store
from ..stores.memory import MemoryStore

__all__ = ["BreakerFactory", "BreakerRouter", "route_name"]

_Req = TypeVar("_Req")
BreakerFactory = Callable[[str], CircuitBreaker]


def route_name(host: str, method: str, path: str) -> str:
    """A per-route breaker name, `host METHOD /folded/{id}` (ids fold as the cascade does)."""
    return f"{host} {method.upper()} {fold_path(path)}"


class BreakerRouter(Generic[_Req]):
    """Picks (and lazily creates) the breaker for a request; records outcomes by status."""

    def __init__(
        self,
        *,
        key: Callable[[_Req], str],
        breaker: CircuitBreaker | None,
        breaker_factory: BreakerFactory | None,
        store: Store | None,
        breaker_settings: Mapping[str, Any],
        failure_statuses: Collection[int],
        failure_exceptions: tuple[type[BaseException], ...],
        on_new_breaker: Callable[[CircuitBreaker], None] | None,
        custom_key: bool = False,
    ) -> None:
        if breaker is not None and (custom_key or breaker_factory is not None):
            raise ValueError("breaker cannot be combined with key or breaker_factory")
        if breaker_factory is not None and (store is not None or breaker_settings):
            raise ValueError("breaker_factory cannot be combined with store or breaker settings")
        if not callable(key):
            raise ValueError(f"key must be a callable taking a request, got {key!r}")
        if not all(isinstance(s, int) and 100 <= s <= 599 for s in failure_statuses):
            raise ValueError(f"failure_statuses must be HTTP status codes: {failure_statuses!r}")
        if not isinstance(failure_exceptions, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in failure_exceptions
        ):
            raise ValueError(
                f"failure_exceptions must be a tuple of exception types: {failure_exceptions!r}"
            )
        self._key = key
        self._fixed = breaker
        self._store = store if store is not None else MemoryStore()
        self._settings = dict(breaker_settings)
        self._factory = breaker_factory or self._build
        if breaker_factory is None and breaker is None:
            # Invalid settings fail here with the breaker's ValueError, not on the first request.
            CircuitBreaker("settings-check", store=MemoryStore(), **self._settings)
        self._failure_statuses = frozenset(failure_statuses)
        self._failure_exceptions = failure_exceptions
        self._on_new = on_new_breaker
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()
        if breaker is not None:
            self._breakers[breaker.name] = breaker
            if on_new_breaker is not None:
                on_new_breaker(breaker)

    def _build(self, name: str) -> CircuitBreaker:
        return CircuitBreaker(name, store=self._store, **self._settings)

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        """The breakers created so far, by key."""
        with self._lock:
            return dict(self._breakers)

    def breaker_for(self, request: _Req) -> CircuitBreaker:
        """The breaker guarding `request`, created on first use."""
        if self._fixed is not None:
            return self._fixed
        name = self._key(request)
        found = self._breakers.get(name)  # dict reads are atomic; lock only to create
        if found is not None:
            return found
        with self._lock:
            found = self._breakers.get(name)
            created = found is None
            if found is None:
                found = self._breakers[name] = self._factory(name)
        if created and self._on_new is not None:
            self._on_new(found)
        return found

    def is_failure_status(self, status: int) -> bool:
        """True when a response with `status` counts against the upstream."""
        return status in self._failure_statuses

    def settle_status(self, permit: Permit, status: int) -> None:
        """Record a response: failure for a failure status, success otherwise (4xx included)."""
        if status in self._failure_statuses:
            permit.failure()
        else:
            permit.success()

    def settle_error(self, permit: Permit, exc: BaseException) -> None:
        """Record an exception: upstream failures count, anything else is the caller's."""
        if isinstance(exc, self._failure_exceptions):
            permit.failure(exc)
        else:
            permit.ignore()

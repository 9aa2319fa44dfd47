"""One breaker per endpoint of an upstream (`breaker.scope: endpoint`), made on first use.

With the default scope one breaker guards the whole upstream, so an endpoint that fails (its own
dependency is down) opens the circuit for its healthy siblings too. With `scope: endpoint` each
endpoint (method + route template, from the same resolver as the cascade) gets its own breaker,
named `<upstream> <METHOD> <template>`. Their number is bounded: past `max_endpoints` the calls
of further endpoints share the upstream's breaker.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cascadebreaker import CircuitBreaker
    from cascadebreaker.sidecar.proxy.hooks import RouteResolver

__all__ = ["EndpointBreakers", "NewBreakerListener"]

NewBreakerListener = Callable[[str, "CircuitBreaker"], None]
"""(`METHOD /template`, breaker): a breaker was made for a new endpoint."""


class EndpointBreakers:
    """The per-endpoint breakers of one upstream."""

    __slots__ = ("_breakers", "_listeners", "_make", "_resolver", "fallback", "limit", "upstream")

    def __init__(
        self,
        upstream: str,
        make: Callable[[str], CircuitBreaker],
        resolver: Callable[[], RouteResolver],
        fallback: CircuitBreaker,
        limit: int,
    ) -> None:
        self.upstream = upstream
        self.fallback = fallback  # the upstream's breaker: endpoints past the limit share it
        self.limit = limit
        self._make = make
        self._resolver = resolver  # read per call: the cascade plugs its own templates in
        self._breakers: dict[str, CircuitBreaker] = {}
        self._listeners: list[NewBreakerListener] = []

    def breaker_for(self, method: bytes, path: bytes) -> CircuitBreaker:
        """The breaker of the endpoint `method path` (query ignored) falls under.

        The route template is resolved per call (paths with ids are unbounded; templates are
        not): the price of this scope, paid only by the upstreams that choose it."""
        method_s = method.decode("ascii", "replace")
        raw = path.decode("latin-1").split("?", 1)[0] or "/"
        endpoint = f"{method_s} {self._resolver()(self.upstream, method_s, raw)}"
        breaker = self._breakers.get(endpoint)
        if breaker is not None:
            return breaker
        if len(self._breakers) >= self.limit:
            return self.fallback
        breaker = self._breakers[endpoint] = self._make(f"{self.upstream} {endpoint}")
        for listener in self._listeners:
            listener(endpoint, breaker)
        return breaker

    def on_new(self, listener: NewBreakerListener) -> None:
        """Call `listener` for every breaker made from now on."""
        self._listeners.append(listener)

    def items(self) -> ItemsView[str, CircuitBreaker]:
        """(`METHOD /template`, breaker) pairs."""
        return self._breakers.items()

"""A route: everything the proxy needs to forward to one upstream (pool, breaker, policy)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cascadebreaker.sidecar.config import RetryConfig, UpstreamConfig
from cascadebreaker.sidecar.proxy.stats import RouteStats
from cascadebreaker.sidecar.upstream.pool import UpstreamPool

if TYPE_CHECKING:
    from cascadebreaker import CircuitBreaker
    from cascadebreaker.core.fast_view import FastView
    from cascadebreaker.sidecar.proxy.endpoint_breakers import EndpointBreakers


class RetryBudget:
    """Retries may add `ratio` of the calls made, plus `min_per_second`; keeps retry storms out."""

    __slots__ = ("_cap", "_clock", "_last", "_min_per_second", "_ratio", "_tokens")

    def __init__(
        self, ratio: float, min_per_second: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ratio = ratio
        self._min_per_second = min_per_second
        self._cap = max(1.0, min_per_second * 10.0)
        self._clock = clock
        self._last = clock()
        self._tokens = self._cap

    def deposit(self) -> None:
        """An original (non-retry) call was made."""
        self._tokens = min(self._cap, self._tokens + self._ratio)

    def withdraw(self) -> bool:
        """Spend one retry if the budget allows it."""
        now = self._clock()
        self._tokens = min(self._cap, self._tokens + (now - self._last) * self._min_per_second)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class Route:
    """One upstream as the proxy sees it."""

    __slots__ = (
        "_turn",
        "breaker",
        "budget",
        "endpoints",
        "failure_table",
        "name",
        "pool",
        "pools",
        "retry_attempts",
        "retry_statuses",
        "shared_store",
        "stats",
        "target",
        "timeout",
        "view",
    )

    def __init__(
        self,
        name: str,
        pool: UpstreamPool,
        breaker: CircuitBreaker | None,
        failure_table: tuple[bool, ...],
        timeout: float,
        retries: RetryConfig,
        more_pools: tuple[UpstreamPool, ...] = (),
    ) -> None:
        self.name = name
        self.pool = pool  # the first instance
        self.pools = (pool, *more_pools)  # every instance of the upstream (`urls:`)
        self._turn = 0
        self.target = pool.target
        self.breaker = breaker
        # Its slot's closed path, read by the pipeline for every call (compiled, `breaker._slot`
        # and the slot's own attributes are generic look-ups; a breaker keeps its slot for life).
        self.view: FastView | None = None if breaker is None else breaker._slot.view
        # Per-endpoint breakers (`breaker.scope: endpoint`), else None: `breaker` guards all.
        self.endpoints: EndpointBreakers | None = None
        self.failure_table = failure_table
        self.timeout = timeout
        self.stats = RouteStats()
        # Set when the breaker lives in a shared store (admission off the closed path is async).
        self.shared_store = False
        self.retry_attempts = retries.attempts
        self.retry_statuses = frozenset(retries.on_statuses)
        self.budget = RetryBudget(retries.budget.ratio, retries.budget.min_per_second)

    @classmethod
    def from_config(
        cls,
        name: str,
        config: UpstreamConfig,
        pool: UpstreamPool,
        breaker: CircuitBreaker | None,
        more_pools: tuple[UpstreamPool, ...] = (),
    ) -> Route:
        """Build from an `upstreams.<name>` section (`more_pools`: its other instances)."""
        return cls(
            name, pool, breaker, config.failure_table(), config.timeout, config.retries, more_pools
        )

    def next_turn(self) -> int:
        """Round robin over the instances: where a new call starts."""
        if len(self.pools) == 1:
            return 0
        self._turn += 1
        return self._turn

    def pool_for(self, turn: int, attempt: int) -> UpstreamPool:
        """The instance of one attempt: each retry (or replay) moves to the next instance."""
        pools = self.pools
        return pools[0] if len(pools) == 1 else pools[(turn + attempt) % len(pools)]

    def breaker_for(self, method: bytes, path: bytes) -> CircuitBreaker | None:
        """The breaker that guards a call: the endpoint's with `scope: endpoint`."""
        endpoints = self.endpoints
        if endpoints is None:
            return self.breaker
        return endpoints.breaker_for(method, path)

    def is_failure(self, status: int) -> bool:
        """Whether the breaker counts this status as a failure."""
        return status < 600 and self.failure_table[status]

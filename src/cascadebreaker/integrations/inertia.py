"""Guarded Inertia props: a prop behind a breaker whose value is the degraded-result dict.

    from inertia import render
    from cascadebreaker.integrations.inertia import StaleCache, guarded_prop

    settlement_api = CircuitBreaker("settlement-api", failure_threshold=3, recovery_timeout=10)
    last_good = StaleCache()

    def report(request):
        return render(request, "Reports/Settlements", {
            "summary": ledger_summary(),
            "settlements": guarded_prop(settlement_api, fetch_settlements, stale=last_good),
        })

A guarded prop is a zero-argument callable, so an Inertia adapter evaluates it only when the
prop is sent: a partial reload naming other props never touches its upstream, and
`router.reload({only: ['settlements']})` runs only its guarded call. `guarded_optional` (left out
of the first visit) and `guarded_deferred` (fetched by the client right after it) wrap it in
inertia-django's prop classes. The value never raises for an upstream failure:

    {"data": ..., "isDegraded": bool, "circuitState": "CLOSED" | "OPEN" | "HALF_OPEN",
     "reasonCode": None | "circuit_open" | "upstream_error" | "failed_result",
     "reason": the same code (kept for pages written before reasonCode),
     "retryAfter": seconds until the circuit admits a probe (0.0 when it admits calls,
                   None when it is forced open), "stale": bool, "asOf": epoch seconds | None}

Inertia page routes answer 200 with these props, never a 503: the client shows any non-Inertia
response in an error modal. This module needs no Django unless `guarded_optional` or
`guarded_deferred` is called (they import inertia-django, the `django` extra).
"""

from __future__ import annotations

import threading
import time
import typing
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from .. import contract
from ..breaker import CircuitBreaker
from ..contract import Reason
from ..degraded import FallbackReason

if typing.TYPE_CHECKING:
    from inertia.prop_classes import DeferredProp, OptionalProp

__all__ = [
    "REASON_CIRCUIT_OPEN",
    "REASON_FAILED_RESULT",
    "REASON_UPSTREAM_ERROR",
    "GuardedProp",
    "StaleCache",
    "guarded_deferred",
    "guarded_optional",
    "guarded_prop",
]

_T = TypeVar("_T")

# Reason codes of a degraded prop: the contract's (the same words as the sidecar's rejections).
REASON_CIRCUIT_OPEN = Reason.CIRCUIT_OPEN  # rejected unrun: OPEN, or half-open probes busy
REASON_UPSTREAM_ERROR = Reason.UPSTREAM_ERROR  # the call ran and raised a failure
REASON_FAILED_RESULT = Reason.FAILED_RESULT  # the call returned a value counted as failed


class StaleCache:
    """The last good value of guarded props, served (marked stale) while their upstream is out.

    One cache may hold several props' values, one per `key`; the oldest entries go first beyond
    `max_entries`, and values older than `max_age` seconds are no longer served. Thread-safe.
    """

    def __init__(
        self,
        max_entries: int = 1024,
        max_age: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive integer, got {max_entries!r}")
        if max_age is not None and (
            isinstance(max_age, bool) or not isinstance(max_age, int | float) or max_age <= 0
        ):
            raise ValueError(f"max_age must be a positive number of seconds, got {max_age!r}")
        self.max_entries = max_entries
        self.max_age = max_age
        self.clock = clock
        self._values: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: Hashable, value: Any) -> float:
        """Remember `value` as the last good one for `key`; returns its time (epoch seconds)."""
        at = self.clock()
        with self._lock:
            self._values[key] = (value, at)
            self._values.move_to_end(key)
            while len(self._values) > self.max_entries:
                self._values.popitem(last=False)
        return at

    def get(self, key: Hashable) -> tuple[Any, float] | None:
        """The last good value for `key` and when it was stored, or None (unknown or too old)."""
        with self._lock:
            found = self._values.get(key)
        if found is None:
            return None
        if self.max_age is not None and self.clock() - found[1] > self.max_age:
            return None
        return found

    def clear(self) -> None:
        """Forget every value."""
        with self._lock:
            self._values.clear()


class GuardedProp(Generic[_T]):
    """A lazily evaluated prop: calling it runs `fetch` through `breaker` and returns the dict."""

    def __init__(
        self,
        breaker: CircuitBreaker,
        fetch: Callable[[], _T],
        *,
        fallback: Callable[[FallbackReason], Any] | None = None,
        stale: StaleCache | None = None,
        key: Hashable = None,
    ) -> None:
        if not isinstance(breaker, CircuitBreaker):
            raise ValueError(f"breaker must be a CircuitBreaker, got {breaker!r}")
        if not callable(fetch):
            raise ValueError(f"fetch must be a zero-argument callable, got {fetch!r}")
        if fallback is not None and not callable(fallback):
            raise ValueError(f"fallback must be callable, got {fallback!r}")
        if stale is not None and not isinstance(stale, StaleCache):
            raise ValueError(f"stale must be a StaleCache, got {stale!r}")
        try:
            hash(key)
        except TypeError:
            raise ValueError(f"key must be hashable, got {key!r}") from None
        self.breaker = breaker
        self.fetch = fetch
        self.fallback = fallback
        self.stale = stale
        self.key = key

    def __call__(self) -> dict[str, Any]:
        """Run the guarded call now; upstream failures give a degraded dict, never an error."""
        called = False
        why: list[FallbackReason] = []

        def run() -> _T:
            nonlocal called
            called = True
            return self.fetch()

        def remember(reason: FallbackReason) -> None:
            why.append(reason)

        result = self.breaker.guard(run, fallback=remember)
        if not result.is_degraded:
            as_of = self.stale.put(self.key, result.data) if self.stale else time.time()
            return _prop(result.data, False, result.circuit_state.value, None, 0.0, False, as_of)
        reason = why[0]
        if not called:
            code = REASON_CIRCUIT_OPEN
        elif reason.exception is None:
            code = REASON_FAILED_RESULT
        else:
            code = REASON_UPSTREAM_ERROR
        # The breaker's own code (why it is open, or call_failed) is in result.reason_code; the
        # prop keeps its three codes above, which say what the page shows.
        retry = result.to_dict()["retryAfter"]
        state = result.circuit_state.value
        if self.fallback is not None:
            return _prop(self.fallback(reason), True, state, code, retry, False, None)
        kept = self.stale.get(self.key) if self.stale is not None else None
        if kept is not None:
            return _prop(kept[0], True, state, code, retry, True, kept[1])
        return _prop(None, True, state, code, retry, False, None)

    def __repr__(self) -> str:
        return f"<GuardedProp {self.breaker.name!r} key={self.key!r}>"


def _prop(
    data: Any,
    degraded: bool,
    state: str,
    reason: Reason | None,
    retry_after: float | None,
    stale: bool,
    as_of: float | None,
) -> dict[str, Any]:
    return {
        "data": data,
        "isDegraded": degraded,
        "circuitState": state,
        contract.REASON_CODE: None if reason is None else reason.value,
        "reason": None if reason is None else reason.value,
        "retryAfter": retry_after,
        "stale": stale,
        "asOf": None if as_of is None else round(as_of, 3),
    }


def guarded_prop(
    breaker: CircuitBreaker,
    fetch: Callable[[], _T],
    *,
    fallback: Callable[[FallbackReason], Any] | None = None,
    stale: StaleCache | None = None,
    key: Hashable = None,
) -> GuardedProp[_T]:
    """A prop evaluated only when sent, whose value is the degraded-result dict of `fetch`."""
    return GuardedProp(breaker, fetch, fallback=fallback, stale=stale, key=key)


def guarded_optional(
    breaker: CircuitBreaker,
    fetch: Callable[[], _T],
    *,
    fallback: Callable[[FallbackReason], Any] | None = None,
    stale: StaleCache | None = None,
    key: Hashable = None,
) -> OptionalProp:
    """An inertia-django optional prop: left out of the first visit, sent when a reload names it."""
    from inertia import optional

    return optional(guarded_prop(breaker, fetch, fallback=fallback, stale=stale, key=key))


def guarded_deferred(
    breaker: CircuitBreaker,
    fetch: Callable[[], _T],
    *,
    group: str = "default",
    fallback: Callable[[FallbackReason], Any] | None = None,
    stale: StaleCache | None = None,
    key: Hashable = None,
) -> DeferredProp:
    """An inertia-django deferred prop: left out of the first visit, then fetched by the client."""
    from inertia import defer

    return defer(guarded_prop(breaker, fetch, fallback=fallback, stale=stale, key=key), group)

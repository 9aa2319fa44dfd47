"""Prometheus metrics for circuit breakers (the `prometheus` extra).

    from cascadebreaker.integrations.prometheus import instrument
    instrument(breaker)                       # into prometheus_client.REGISTRY

    collector = BreakerCollector(registry)    # or explicitly, one collector per registry
    collector.track(breaker)

Exposed, per breaker:
    ccb_breaker_state{breaker, state}              1 for the current state, else 0
    ccb_breaker_scope{breaker, scope}              1 for local (this process alone) or shared
    ccb_breaker_calls_total{breaker, outcome}      success / failure / ignored / rejected
    ccb_breaker_transitions_total{breaker, from_state, to_state}

The hot path pays nothing: states and call counters are read from the breaker at scrape time;
only transitions (rare) are counted, by a transition listener.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..breaker import CircuitBreaker
from ..core.state import Scope, State
from ..events import TransitionEvent

__all__ = ["OUTCOMES", "BreakerCollector", "collector_for", "instrument"]

OUTCOMES = ("success", "failure", "ignored", "rejected")


class _TransitionCounter:
    """A breaker's transition listener; goes quiet when the breaker is untracked."""

    def __init__(self, collector: BreakerCollector) -> None:
        self.collector = collector
        self.active = True

    def __call__(self, event: TransitionEvent) -> None:
        if self.active:
            self.collector._count_transition(event)


class BreakerCollector:
    """A prometheus_client collector exposing the breakers it tracks."""

    def __init__(
        self, registry: CollectorRegistry | None = REGISTRY, *, namespace: str = "ccb"
    ) -> None:
        if not namespace.isidentifier():
            raise ValueError(f"namespace must be a metric-name prefix, got {namespace!r}")
        self._prefix = f"{namespace}_breaker"
        self._lock = threading.Lock()
        self._tracked: dict[str, tuple[CircuitBreaker, _TransitionCounter]] = {}
        self._transitions: dict[tuple[str, str, str], int] = {}
        if registry is not None:
            registry.register(self)

    def track(self, breaker: CircuitBreaker) -> CircuitBreaker:
        """Expose `breaker` from now on; returns it (tracking twice is harmless)."""
        with self._lock:
            known = self._tracked.get(breaker.name)
            if known is not None:
                if known[0].store is not breaker.store:
                    raise ValueError(
                        f"breaker {breaker.name!r} is already tracked with another store"
                    )
                return breaker  # same name and store: the same state, already exposed
            counter = _TransitionCounter(self)
            self._tracked[breaker.name] = (breaker, counter)
        breaker.add_listener(counter)
        return breaker

    def untrack(self, name: str) -> None:
        """Stop exposing breaker `name` (its transition counts are dropped)."""
        with self._lock:
            known = self._tracked.pop(name, None)
            if known is not None:
                known[1].active = False
            for key in [k for k in self._transitions if k[0] == name]:
                del self._transitions[key]

    def tracked(self) -> list[str]:
        """Names of the breakers exposed."""
        with self._lock:
            return sorted(self._tracked)

    def _count_transition(self, event: TransitionEvent) -> None:
        key = (event.name, event.from_state.value, event.to_state.value)
        with self._lock:
            self._transitions[key] = self._transitions.get(key, 0) + 1

    def _families(
        self,
    ) -> tuple[GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily, CounterMetricFamily]:
        p = self._prefix
        return (
            GaugeMetricFamily(
                f"{p}_state", "Circuit state: 1 for the current state.", labels=["breaker", "state"]
            ),
            GaugeMetricFamily(
                f"{p}_scope",
                "Whose state: local (this process alone, e.g. a trip short of the fleet quorum) "
                "or shared (the fleet's).",
                labels=["breaker", "scope"],
            ),
            CounterMetricFamily(
                f"{p}_calls", "Calls through the breaker by outcome.", labels=["breaker", "outcome"]
            ),
            CounterMetricFamily(
                f"{p}_transitions",
                "State transitions of the breaker.",
                labels=["breaker", "from_state", "to_state"],
            ),
        )

    def describe(self) -> Iterable[Metric]:
        """The metric families (lets the registry reject duplicate names at register time)."""
        return self._families()

    def collect(self) -> Iterator[Metric]:
        """Read every tracked breaker now."""
        state, scope, calls, transitions = self._families()
        with self._lock:
            breakers = [b for b, _ in self._tracked.values()]
            moves = sorted(self._transitions.items())
        for breaker in breakers:
            snapshot = breaker.snapshot()
            for candidate in State:
                state.add_metric(
                    [breaker.name, candidate.value], float(candidate is snapshot.state)
                )
            for where in Scope:
                scope.add_metric([breaker.name, where.value], float(where is snapshot.scope))
            counts = snapshot.calls
            for outcome in OUTCOMES:
                calls.add_metric([breaker.name, outcome], float(getattr(counts, outcome)))
        for (name, from_state, to_state), count in moves:
            transitions.add_metric([name, from_state, to_state], float(count))
        yield state
        yield scope
        yield calls
        yield transitions


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, BreakerCollector] = (
    weakref.WeakKeyDictionary()
)
_collectors_lock = threading.Lock()


def collector_for(registry: CollectorRegistry = REGISTRY) -> BreakerCollector:
    """The BreakerCollector that `instrument` registered in `registry` (created on first use)."""
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = _collectors[registry] = BreakerCollector(registry)
        return collector


def instrument(breaker: CircuitBreaker, registry: CollectorRegistry = REGISTRY) -> CircuitBreaker:
    """Expose `breaker` in `registry`; returns the breaker so it can wrap its construction."""
    return collector_for(registry).track(breaker)

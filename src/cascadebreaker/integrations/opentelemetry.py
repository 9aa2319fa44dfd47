"""OpenTelemetry metrics and span events for breakers, through `opentelemetry-api` only.

    from cascadebreaker.integrations.opentelemetry import BreakerTelemetry
    telemetry = BreakerTelemetry()           # the global MeterProvider / TracerProvider's spans
    telemetry.instrument(breaker)

Metrics (instrument names follow OTel's dotted style):
    cascadebreaker.breaker.state          gauge, 1 for the current state {breaker, state}
    cascadebreaker.breaker.calls          counter {breaker, outcome}: success, failure, ignored,
                                          rejected
    cascadebreaker.breaker.transitions    counter {breaker, from_state, to_state}
    cascadebreaker.breaker.call.duration  histogram in seconds (breakers that time calls:
                                          those with a slow-call policy)
Span events on the span current when it happens: `cascadebreaker.transition`, and
`cascadebreaker.rejected` for a call the breaker refused (the span also gets the attribute
`cascadebreaker.rejected = true`). The SDK, exporters and providers are the application's
choice; without an SDK every instrument is a no-op.

Cost: counting calls adds an outcome listener, which takes the breaker off its lock-free
closed path (`calls=False` keeps it: the state gauge and transitions cost nothing per call).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from ..breaker import CircuitBreaker
from ..core.state import State
from ..events import OutcomeEvent, TransitionEvent

__all__ = ["BreakerTelemetry"]

_SCOPE = "cascadebreaker"


class BreakerTelemetry:
    """One set of OTel instruments; `instrument(breaker)` wires a breaker to them."""

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._lock = threading.Lock()
        self._breakers: dict[str, CircuitBreaker] = {}
        self._calls = meter.create_counter(
            "cascadebreaker.breaker.calls", unit="{call}", description="Calls by outcome."
        )
        self._transitions = meter.create_counter(
            "cascadebreaker.breaker.transitions",
            unit="{transition}",
            description="State transitions of the breaker.",
        )
        self._duration = meter.create_histogram(
            "cascadebreaker.breaker.call.duration", unit="s", description="Duration of calls."
        )
        meter.create_observable_gauge(
            "cascadebreaker.breaker.state",
            callbacks=[self._observe_states],
            description="Circuit state: 1 for the current state.",
        )

    def instrument(self, breaker: CircuitBreaker, *, calls: bool = True) -> CircuitBreaker:
        """Record `breaker`'s state, transitions and (with `calls`) its calls; returns it."""
        with self._lock:
            if breaker.name in self._breakers:
                return breaker
            self._breakers[breaker.name] = breaker
        breaker.add_listener(self._on_transition)
        if calls:
            breaker.add_outcome_listener(self._on_outcome)
        return breaker

    def _observe_states(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            breakers = list(self._breakers.values())
        for breaker in breakers:
            current = breaker.state
            for state in State:
                yield Observation(
                    int(state is current), {"breaker": breaker.name, "state": state.value}
                )

    def _on_transition(self, event: TransitionEvent) -> None:
        moved = {
            "breaker": event.name,
            "from_state": event.from_state.value,
            "to_state": event.to_state.value,
        }
        self._transitions.add(1, moved)
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event("cascadebreaker.transition", {**moved, "reason": event.reason})

    def _on_outcome(self, event: OutcomeEvent) -> None:
        outcome = "rejected" if event.outcome is None else event.outcome.name.lower()
        self._calls.add(1, {"breaker": event.name, "outcome": outcome})
        if event.duration > 0:
            self._duration.record(event.duration, {"breaker": event.name, "outcome": outcome})
        if event.outcome is None:
            span = trace.get_current_span()
            if span.is_recording():
                span.set_attribute("cascadebreaker.rejected", True)
                span.add_event(
                    "cascadebreaker.rejected",
                    {"breaker": event.name, "state": event.state.value},
                )

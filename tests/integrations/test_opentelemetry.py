"""The OTel listener, read back through the real SDK's in-memory reader and span exporter."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cascadebreaker import CircuitBreaker, CircuitOpenError, SlowCallRate, TimeWindow
from cascadebreaker.integrations.opentelemetry import BreakerTelemetry

from .conftest import FakeClock


def points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Metric name -> [(attributes, value or histogram count)]."""
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = point.count  # type: ignore[attr-defined]
                    found.setdefault(metric.name, []).append((dict(point.attributes), value))
    return found


def value(found: list[tuple[dict[str, Any], Any]], **attrs: str) -> Any:
    matches = [v for a, v in found if all(a.get(k) == x for k, x in attrs.items())]
    assert len(matches) == 1, (attrs, found)
    return matches[0]


def test_metrics_and_span_events(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    telemetry = BreakerTelemetry(MeterProvider(metric_readers=[reader]))
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tracer_provider.get_tracer("test")

    breaker = telemetry.instrument(
        CircuitBreaker("payment", failure_threshold=2, recovery_timeout=5, clock=clock)
    )
    assert telemetry.instrument(breaker) is breaker  # twice is harmless
    breaker.call(lambda: "ok")
    with tracer.start_as_current_span("checkout"):
        for _ in range(2):
            with pytest.raises(ConnectionError):
                breaker.call(_fail)
        with pytest.raises(CircuitOpenError):
            breaker.call(lambda: "ok")

    found = points(reader)
    calls = found["cascadebreaker.breaker.calls"]
    assert value(calls, outcome="success") == 1
    assert value(calls, outcome="failure") == 2
    assert value(calls, outcome="rejected") == 1
    states = found["cascadebreaker.breaker.state"]
    assert value(states, state="OPEN") == 1
    assert value(states, state="CLOSED") == 0
    moves = found["cascadebreaker.breaker.transitions"]
    assert value(moves, from_state="CLOSED", to_state="OPEN") == 1

    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None and span.attributes["cascadebreaker.rejected"] is True
    names = [e.name for e in span.events]
    assert names == ["cascadebreaker.transition", "cascadebreaker.rejected"]
    assert span.events[0].attributes["to_state"] == "OPEN"  # type: ignore[index]


def test_durations_for_breakers_that_time_calls(clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    telemetry = BreakerTelemetry(MeterProvider(metric_readers=[reader]))
    policy = SlowCallRate(duration=1.0, window=TimeWindow(60))
    breaker = telemetry.instrument(CircuitBreaker("slow", policy=policy, clock=clock))

    def slow() -> None:
        clock.advance(0.25)

    breaker.call(slow)
    durations = points(reader)["cascadebreaker.breaker.call.duration"]
    assert value(durations, breaker="slow", outcome="success") == 1


def test_without_call_counting_the_closed_path_stays_free() -> None:
    reader = InMemoryMetricReader()
    telemetry = BreakerTelemetry(MeterProvider(metric_readers=[reader]))
    breaker = telemetry.instrument(CircuitBreaker("cheap"), calls=False)
    breaker.call(lambda: None)
    found = points(reader)
    assert "cascadebreaker.breaker.calls" not in found
    assert value(found["cascadebreaker.breaker.state"], state="CLOSED") == 1


def _fail() -> None:
    raise ConnectionError("down")

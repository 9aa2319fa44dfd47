"""Prometheus collector: fresh registries, real scrapes."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from cascadebreaker import CircuitBreaker, CircuitOpenError, MemoryStore
from cascadebreaker.integrations.httpx_transport import BreakerTransport
from cascadebreaker.integrations.prometheus import BreakerCollector, collector_for, instrument

from .conftest import FakeClock, Upstream


class Boom(Exception):
    pass


class Ignored(Exception):
    pass


def fail() -> None:
    raise Boom


def ignored() -> None:
    raise Ignored


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def states(registry: CollectorRegistry, breaker: str) -> dict[str, float | None]:
    return {
        s: sample(registry, "ccb_breaker_state", breaker=breaker, state=s)
        for s in ("CLOSED", "OPEN", "HALF_OPEN")
    }


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_state_gauge_follows_the_circuit(registry: CollectorRegistry, clock: FakeClock) -> None:
    breaker = CircuitBreaker("pay", failure_threshold=1, recovery_timeout=5, clock=clock)
    BreakerCollector(registry).track(breaker)
    assert states(registry, "pay") == {"CLOSED": 1.0, "OPEN": 0.0, "HALF_OPEN": 0.0}
    with pytest.raises(Boom):
        breaker.call(fail)
    assert states(registry, "pay") == {"CLOSED": 0.0, "OPEN": 1.0, "HALF_OPEN": 0.0}
    clock.advance(5)
    permit = breaker.acquire()
    assert states(registry, "pay") == {"CLOSED": 0.0, "OPEN": 0.0, "HALF_OPEN": 1.0}
    permit.success()
    assert states(registry, "pay") == {"CLOSED": 1.0, "OPEN": 0.0, "HALF_OPEN": 0.0}


def test_calls_are_counted_by_outcome(registry: CollectorRegistry) -> None:
    breaker = CircuitBreaker("pay", failure_threshold=2, ignore_exceptions=(Ignored,))
    instrument(breaker, registry)
    for _ in range(3):
        breaker.call(lambda: "ok")
    with pytest.raises(Ignored):
        breaker.call(ignored)
    for _ in range(2):
        with pytest.raises(Boom):
            breaker.call(fail)
    for _ in range(4):
        with pytest.raises(CircuitOpenError):
            breaker.call(lambda: "ok")
    counts = {
        outcome: sample(registry, "ccb_breaker_calls_total", breaker="pay", outcome=outcome)
        for outcome in ("success", "failure", "ignored", "rejected")
    }
    assert counts == {"success": 3.0, "failure": 2.0, "ignored": 1.0, "rejected": 4.0}


def test_transitions_are_counted(registry: CollectorRegistry, clock: FakeClock) -> None:
    breaker = CircuitBreaker("pay", failure_threshold=1, recovery_timeout=5, clock=clock)
    instrument(breaker, registry)
    for _ in range(2):
        with pytest.raises(Boom):
            breaker.call(fail)
        clock.advance(5)
    breaker.call(lambda: None)

    def moved(from_state: str, to_state: str) -> float | None:
        return sample(
            registry,
            "ccb_breaker_transitions_total",
            breaker="pay",
            from_state=from_state,
            to_state=to_state,
        )

    assert moved("CLOSED", "OPEN") == 1.0
    assert moved("OPEN", "HALF_OPEN") == 2.0
    assert moved("HALF_OPEN", "OPEN") == 1.0
    assert moved("HALF_OPEN", "CLOSED") == 1.0


def test_instrument_twice_counts_once(registry: CollectorRegistry) -> None:
    breaker = CircuitBreaker("pay", failure_threshold=1)
    assert instrument(breaker, registry) is breaker
    instrument(breaker, registry)
    with pytest.raises(Boom):
        breaker.call(fail)
    assert collector_for(registry).tracked() == ["pay"]
    text = generate_latest(registry).decode()
    assert (
        'ccb_breaker_transitions_total{breaker="pay",from_state="CLOSED",to_state="OPEN"} 1.0'
        in text
    )


def test_output_parses_as_prometheus_text(registry: CollectorRegistry) -> None:
    collector = BreakerCollector(registry)
    collector.track(CircuitBreaker("a"))
    collector.track(CircuitBreaker("b"))
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    assert families["ccb_breaker_state"].type == "gauge"
    assert families["ccb_breaker_calls"].type == "counter"
    assert families["ccb_breaker_transitions"].type == "counter"
    assert {s.labels["breaker"] for s in families["ccb_breaker_state"].samples} == {"a", "b"}


def test_untrack_removes_the_series(registry: CollectorRegistry) -> None:
    collector = BreakerCollector(registry)
    breaker = collector.track(CircuitBreaker("gone", failure_threshold=1))
    with pytest.raises(Boom):
        breaker.call(fail)
    collector.untrack("gone")
    assert 'breaker="gone"' not in generate_latest(registry).decode()
    breaker.reset()  # a transition after untrack is not counted anywhere
    collector.track(breaker)
    assert (
        sample(
            registry,
            "ccb_breaker_transitions_total",
            breaker="gone",
            from_state="OPEN",
            to_state="CLOSED",
        )
        is None
    )


def test_same_name_from_another_store_is_refused(registry: CollectorRegistry) -> None:
    collector = BreakerCollector(registry)
    collector.track(CircuitBreaker("pay", store=MemoryStore()))
    with pytest.raises(ValueError, match="pay"):
        collector.track(CircuitBreaker("pay", store=MemoryStore()))


def test_two_collectors_in_one_registry_collide(registry: CollectorRegistry) -> None:
    BreakerCollector(registry)
    with pytest.raises(ValueError, match="Duplicated"):
        BreakerCollector(registry)


def test_namespace_prefixes_metric_names(registry: CollectorRegistry) -> None:
    BreakerCollector(registry, namespace="shop").track(CircuitBreaker("pay"))
    assert sample(registry, "shop_breaker_state", breaker="pay", state="CLOSED") == 1.0
    with pytest.raises(ValueError, match="namespace"):
        BreakerCollector(None, namespace="bad name")


def test_scrape_over_http_sees_httpx_transport_breakers(
    registry: CollectorRegistry, upstream: Upstream
) -> None:
    collector = BreakerCollector(registry)
    transport = BreakerTransport(failure_threshold=1, on_new_breaker=collector.track)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        with httpx.Client(transport=transport) as client:
            client.get(upstream.url("/status/500"))
            with pytest.raises(CircuitOpenError):
                client.get(upstream.url("/"))
        scrape = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics").text
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    name = upstream.netloc
    assert f'ccb_breaker_state{{breaker="{name}",state="OPEN"}} 1.0' in scrape
    assert f'ccb_breaker_calls_total{{breaker="{name}",outcome="failure"}} 1.0' in scrape
    assert f'ccb_breaker_calls_total{{breaker="{name}",outcome="rejected"}} 1.0' in scrape

"""BreakerTransport / AsyncBreakerTransport against a real HTTP server on loopback."""

from __future__ import annotations

import httpx
import pytest

from cascadebreaker import CircuitBreaker, CircuitOpenError, MemoryStore, State
from cascadebreaker.integrations.httpx_transport import (
    REJECTED_HEADER,
    AsyncBreakerTransport,
    BreakerTransport,
    host_key,
)

from .conftest import FakeClock, Upstream


def test_5xx_trips_the_host_breaker_and_rejects_without_calling(upstream: Upstream) -> None:
    transport = BreakerTransport(failure_threshold=2, recovery_timeout=60)
    with httpx.Client(transport=transport) as client:
        assert client.get(upstream.url("/status/500")).status_code == 500
        assert client.get(upstream.url("/status/503")).status_code == 503
        breaker = transport.breakers[upstream.netloc]
        assert breaker.state is State.OPEN
        with pytest.raises(CircuitOpenError) as caught:
            client.get(upstream.url("/status/200"))
    assert caught.value.name == upstream.netloc
    assert caught.value.retry_after > 0
    assert upstream.hits == 2  # the rejected request never left


def test_4xx_is_not_a_failure(upstream: Upstream) -> None:
    transport = BreakerTransport(failure_threshold=2)
    with httpx.Client(transport=transport) as client:
        statuses = [client.get(upstream.url(f"/status/{s}")).status_code for s in (404, 400, 429)]
    assert statuses == [404, 400, 429]
    assert transport.breakers[upstream.netloc].state is State.CLOSED
    assert transport.breakers[upstream.netloc].snapshot()["calls"]["failure"] == 0


def test_success_resets_the_failure_run(upstream: Upstream) -> None:
    transport = BreakerTransport(failure_threshold=2)
    with httpx.Client(transport=transport) as client:
        for _ in range(3):
            client.get(upstream.url("/status/500"))
            client.get(upstream.url("/status/200"))
    assert transport.breakers[upstream.netloc].state is State.CLOSED


def test_connect_error_is_a_failure(dead_url: str) -> None:
    transport = BreakerTransport(failure_threshold=1)
    with httpx.Client(transport=transport) as client:
        with pytest.raises(httpx.ConnectError):
            client.get(dead_url)
        with pytest.raises(CircuitOpenError):
            client.get(dead_url)


def test_timeout_is_a_failure(upstream: Upstream) -> None:
    transport = BreakerTransport(failure_threshold=1)
    with httpx.Client(transport=transport, timeout=0.05) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.get(upstream.url("/sleep/0.5"))
        assert transport.breakers[upstream.netloc].state is State.OPEN


def test_one_breaker_per_host(upstream: Upstream, other_upstream: Upstream) -> None:
    transport = BreakerTransport(failure_threshold=1)
    with httpx.Client(transport=transport) as client:
        client.get(upstream.url("/status/500"))
        assert client.get(other_upstream.url("/status/200")).status_code == 200
        with pytest.raises(CircuitOpenError):
            client.get(upstream.url("/"))
    assert set(transport.breakers) == {upstream.netloc, other_upstream.netloc}
    assert transport.breakers[other_upstream.netloc].state is State.CLOSED


def test_key_function_picks_the_breaker(upstream: Upstream) -> None:
    transport = BreakerTransport(key=lambda r: r.url.path.split("/")[1], failure_threshold=1)
    with httpx.Client(transport=transport) as client:
        client.get(upstream.url("/status/500"))
        assert client.get(upstream.url("/sleep/0")).status_code == 200
    assert transport.breakers["status"].state is State.OPEN
    assert transport.breakers["sleep"].state is State.CLOSED


def test_open_circuit_recovers_through_a_probe(upstream: Upstream, clock: FakeClock) -> None:
    transport = BreakerTransport(failure_threshold=1, recovery_timeout=10, clock=clock)
    with httpx.Client(transport=transport) as client:
        client.get(upstream.url("/status/502"))
        with pytest.raises(CircuitOpenError):
            client.get(upstream.url("/status/200"))
        clock.advance(10)
        assert client.get(upstream.url("/status/200")).status_code == 200
    assert transport.breakers[upstream.netloc].state is State.CLOSED


def test_respond_mode_returns_a_synthetic_503(upstream: Upstream) -> None:
    transport = BreakerTransport(failure_threshold=1, recovery_timeout=7.2, on_open="respond")
    with httpx.Client(transport=transport) as client:
        client.get(upstream.url("/status/500"))
        response = client.get(upstream.url("/status/200"))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "8"
    assert response.headers[REJECTED_HEADER] == upstream.netloc
    body = response.json()
    assert body["reasonCode"] == "circuit_open"
    assert body["breaker"] == upstream.netloc
    assert body["circuitState"] == "OPEN"
    assert 0 < body["retryAfter"] <= 7.2
    assert body["causeChain"] == [{"endpoint": f"{upstream.netloc} * *", "reason": "circuit_open"}]
    assert upstream.hits == 1


def test_respond_mode_on_forced_open_has_no_retry_after() -> None:
    breaker = CircuitBreaker("pinned")
    breaker.force_open()
    transport = BreakerTransport(
        httpx.MockTransport(lambda r: httpx.Response(200)), breaker=breaker, on_open="respond"
    )
    with httpx.Client(transport=transport) as client:
        response = client.get("http://example.test/")
    assert response.status_code == 503
    assert "retry-after" not in response.headers
    assert response.json()["retryAfter"] is None


def test_custom_failure_statuses(upstream: Upstream) -> None:
    transport = BreakerTransport(failure_threshold=1, failure_statuses={429})
    with httpx.Client(transport=transport) as client:
        client.get(upstream.url("/status/500"))  # not a failure any more
        assert transport.breakers[upstream.netloc].state is State.CLOSED
        client.get(upstream.url("/status/429"))
    assert transport.breakers[upstream.netloc].state is State.OPEN


def test_streamed_response_is_recorded_at_headers(upstream: Upstream) -> None:
    transport = BreakerTransport(failure_threshold=1)
    client = httpx.Client(transport=transport)
    with client, client.stream("GET", upstream.url("/status/500")) as response:
        # The body is still unread, yet the outcome already counts.
        assert transport.breakers[upstream.netloc].state is State.OPEN
        assert response.read() == b"/status/500\n"


def test_shared_store_shares_breakers_between_transports(upstream: Upstream) -> None:
    store = MemoryStore()
    first = BreakerTransport(store=store, failure_threshold=1)
    second = BreakerTransport(store=store, failure_threshold=1)
    with httpx.Client(transport=first) as a, httpx.Client(transport=second) as b:
        a.get(upstream.url("/status/500"))
        with pytest.raises(CircuitOpenError):
            b.get(upstream.url("/"))


def test_on_new_breaker_hears_each_breaker_once(
    upstream: Upstream, other_upstream: Upstream
) -> None:
    created: list[str] = []
    transport = BreakerTransport(on_new_breaker=lambda b: created.append(b.name))
    with httpx.Client(transport=transport) as client:
        for _ in range(3):
            client.get(upstream.url("/"))
            client.get(other_upstream.url("/"))
    assert sorted(created) == sorted([upstream.netloc, other_upstream.netloc])


def test_breaker_factory_builds_each_breaker(upstream: Upstream) -> None:
    transport = BreakerTransport(
        breaker_factory=lambda name: CircuitBreaker(f"http:{name}", failure_threshold=1)
    )
    with httpx.Client(transport=transport) as client:
        client.get(upstream.url("/status/500"))
    assert transport.breakers[upstream.netloc].name == f"http:{upstream.netloc}"
    assert transport.breakers[upstream.netloc].state is State.OPEN


async def test_async_transport_trips_and_rejects(upstream: Upstream) -> None:
    transport = AsyncBreakerTransport(failure_threshold=2, recovery_timeout=60)
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(upstream.url("/status/500"))).status_code == 500
        assert (await client.get(upstream.url("/status/404"))).status_code == 404
        assert (await client.get(upstream.url("/status/500"))).status_code == 500
        assert (await client.get(upstream.url("/status/500"))).status_code == 500
        with pytest.raises(CircuitOpenError):
            await client.get(upstream.url("/"))
    assert upstream.hits == 4


async def test_async_connect_error_and_timeout_are_failures(
    upstream: Upstream, dead_url: str
) -> None:
    transport = AsyncBreakerTransport(failure_threshold=1)
    async with httpx.AsyncClient(transport=transport, timeout=0.05) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(dead_url)
        with pytest.raises(httpx.ReadTimeout):
            await client.get(upstream.url("/sleep/0.5"))
    assert {b.state for b in transport.breakers.values()} == {State.OPEN}
    assert len(transport.breakers) == 2


async def test_async_respond_mode(upstream: Upstream) -> None:
    transport = AsyncBreakerTransport(failure_threshold=1, on_open="respond")
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(upstream.url("/status/500"))
        response = await client.get(upstream.url("/"))
    assert response.status_code == 503
    assert response.json()["circuitState"] == "OPEN"


def test_default_key_is_host_and_explicit_port() -> None:
    assert host_key(httpx.Request("GET", "https://user:pw@API.example.com/x")) == "api.example.com"
    assert host_key(httpx.Request("GET", "http://127.0.0.1:8080/x")) == "127.0.0.1:8080"

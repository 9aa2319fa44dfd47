"""The requests adapter against a real HTTP server on loopback, through a real Session."""

from __future__ import annotations

import socket

import pytest
import requests

from cascadebreaker import CircuitBreaker, CircuitOpenError, State
from cascadebreaker.integrations.requests import BreakerAdapter, route_key

from .conftest import FakeClock, Upstream


def session(adapter: BreakerAdapter) -> requests.Session:
    s = requests.Session()
    s.mount("http://", adapter)
    return s


def test_5xx_opens_the_hosts_breaker_and_rejects_before_any_socket(
    upstream: Upstream, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = BreakerAdapter(failure_threshold=2, recovery_timeout=10, clock=clock)
    s = session(adapter)
    assert s.get(upstream.url("/status/503")).status_code == 503
    assert s.get(upstream.url("/status/500")).status_code == 500
    assert adapter.breakers[upstream.netloc].state is State.OPEN
    hits = upstream.hits

    def no_socket(*args: object, **kwargs: object) -> None:
        raise AssertionError("a socket was created for a rejected request")

    monkeypatch.setattr(socket, "create_connection", no_socket)
    monkeypatch.setattr(socket.socket, "connect", no_socket)
    with pytest.raises(CircuitOpenError) as info:
        s.get(upstream.url("/status/200"))
    monkeypatch.undo()
    assert info.value.name == upstream.netloc
    assert info.value.retry_after == pytest.approx(10)
    assert upstream.hits == hits
    clock.advance(10)
    assert s.get(upstream.url("/status/200")).status_code == 200  # the probe closes it
    assert adapter.breakers[upstream.netloc].state is State.CLOSED


def test_4xx_is_not_a_failure_by_default_but_can_be(upstream: Upstream) -> None:
    adapter = BreakerAdapter(failure_threshold=1)
    s = session(adapter)
    for _ in range(3):
        assert s.get(upstream.url("/status/404")).status_code == 404
    assert adapter.breakers[upstream.netloc].state is State.CLOSED
    strict = BreakerAdapter(failure_threshold=1, failure_statuses={429, *range(500, 600)})
    session(strict).get(upstream.url("/status/429"))
    assert strict.breakers[upstream.netloc].state is State.OPEN


def test_connection_errors_fail_and_the_exception_is_the_callers_own(dead_url: str) -> None:
    adapter = BreakerAdapter(failure_threshold=2)
    s = session(adapter)
    for _ in range(2):
        with pytest.raises(requests.ConnectionError):
            s.get(dead_url, timeout=2)
    with pytest.raises(CircuitOpenError):
        s.get(dead_url, timeout=2)


def test_hosts_have_their_own_breakers(upstream: Upstream, other_upstream: Upstream) -> None:
    adapter = BreakerAdapter(failure_threshold=1)
    s = session(adapter)
    s.get(upstream.url("/status/500"))
    assert s.get(other_upstream.url("/status/200")).status_code == 200
    assert adapter.breakers[upstream.netloc].state is State.OPEN
    assert adapter.breakers[other_upstream.netloc].state is State.CLOSED


def test_per_route_breakers_fold_ids(upstream: Upstream) -> None:
    adapter = BreakerAdapter(key=route_key, failure_threshold=1)
    s = session(adapter)
    s.get(upstream.url("/status/500"))  # route GET /status/{id}
    with pytest.raises(CircuitOpenError):
        s.get(upstream.url("/status/200"))  # same route template
    assert s.get(upstream.url("/hello")).status_code == 200
    assert set(adapter.breakers) == {
        f"{upstream.netloc} GET /status/{{id}}",
        f"{upstream.netloc} GET /hello",
    }


def test_one_fixed_breaker_and_invalid_settings(upstream: Upstream) -> None:
    breaker = CircuitBreaker("api", failure_threshold=1)
    s = session(BreakerAdapter(breaker=breaker))
    s.get(upstream.url("/status/502"))
    assert breaker.state is State.OPEN
    with pytest.raises(ValueError, match="failure_threshold"):
        BreakerAdapter(failure_threshold=0)
    with pytest.raises(ValueError, match="breaker cannot be combined"):
        BreakerAdapter(breaker=breaker, key=route_key)
    with pytest.raises(ValueError, match="failure_statuses"):
        BreakerAdapter(failure_statuses=[999])


def test_a_callers_mistake_is_ignored_not_counted(upstream: Upstream) -> None:
    adapter = BreakerAdapter(failure_threshold=1)
    s = session(adapter)
    with pytest.raises(ValueError, match="timeout"):
        s.get(upstream.url("/status/200"), timeout=(1, 2, 3))  # type: ignore[arg-type]
    breaker = adapter.breakers[upstream.netloc]
    assert breaker.state is State.CLOSED
    assert breaker.snapshot()["calls"]["ignored"] == 1

"""BreakerTransport edge cases over httpx.MockTransport and hand-written inner transports."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from cascadebreaker import CircuitBreaker, CircuitOpenError, State
from cascadebreaker.integrations.httpx_transport import AsyncBreakerTransport, BreakerTransport

from .conftest import FakeClock

URL = "http://upstream.test/x"


class ClosingTransport(httpx.BaseTransport):
    """Records whether close() reached it."""

    def __init__(self) -> None:
        self.closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    def close(self) -> None:
        self.closed = True


class AsyncClosingTransport(httpx.AsyncBaseTransport):
    """Records whether aclose() reached it."""

    def __init__(self) -> None:
        self.closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    async def aclose(self) -> None:
        self.closed = True


def raising(exc: Exception) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return httpx.MockTransport(handler)


def test_close_reaches_the_inner_transport() -> None:
    inner = ClosingTransport()
    with httpx.Client(transport=BreakerTransport(inner)) as client:
        assert client.get(URL).status_code == 200
    assert inner.closed


async def test_aclose_reaches_the_inner_transport() -> None:
    inner = AsyncClosingTransport()
    async with httpx.AsyncClient(transport=AsyncBreakerTransport(inner)) as client:
        assert (await client.get(URL)).status_code == 200
    assert inner.closed


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectTimeout("slow"),
        httpx.ReadError("reset"),
        httpx.RemoteProtocolError("garbage"),
        httpx.PoolTimeout("pool"),
    ],
)
def test_upstream_errors_are_failures(exc: Exception) -> None:
    transport = BreakerTransport(raising(exc), failure_threshold=1)
    with httpx.Client(transport=transport) as client, pytest.raises(type(exc)):
        client.get(URL)
    assert transport.breakers["upstream.test"].state is State.OPEN


@pytest.mark.parametrize(
    "exc", [httpx.UnsupportedProtocol("ftp"), httpx.LocalProtocolError("bad"), ValueError("x")]
)
def test_callers_own_errors_are_ignored_and_propagate(exc: Exception) -> None:
    transport = BreakerTransport(raising(exc), failure_threshold=1)
    with httpx.Client(transport=transport) as client:
        for _ in range(3):
            with pytest.raises(type(exc)):
                client.get(URL)
    snapshot = transport.breakers["upstream.test"].snapshot()
    assert snapshot["state"] == "CLOSED"
    assert snapshot["calls"]["ignored"] == 3


def test_breaker_ignore_exceptions_still_apply() -> None:
    transport = BreakerTransport(
        raising(httpx.ReadTimeout("slow")),
        failure_threshold=1,
        ignore_exceptions=(httpx.ReadTimeout,),
    )
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ReadTimeout):
        client.get(URL)
    assert transport.breakers["upstream.test"].state is State.CLOSED


def test_a_fixed_breaker_guards_every_host() -> None:
    breaker = CircuitBreaker("all-upstreams", failure_threshold=1)
    inner = httpx.MockTransport(lambda r: httpx.Response(500))
    transport = BreakerTransport(inner, breaker=breaker)
    with httpx.Client(transport=transport) as client:
        client.get("http://a.test/")
        with pytest.raises(CircuitOpenError):
            client.get("http://b.test/")
    assert transport.breakers == {"all-upstreams": breaker}


async def test_cancelled_probe_frees_the_half_open_slot(clock: FakeClock) -> None:
    gate = asyncio.Event()
    probing = asyncio.Event()
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(500)
        if calls == 2:
            probing.set()
            await gate.wait()  # the probe hangs until cancelled
        return httpx.Response(200)

    transport = AsyncBreakerTransport(
        httpx.MockTransport(handler), failure_threshold=1, recovery_timeout=5, clock=clock
    )
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        clock.advance(5)
        probe = asyncio.create_task(client.get(URL))
        await asyncio.wait_for(probing.wait(), timeout=10)
        assert transport.breakers["upstream.test"].state is State.HALF_OPEN
        with pytest.raises(CircuitOpenError):
            await client.get(URL)  # the only probe slot is taken
        probe.cancel()
        with pytest.raises(asyncio.CancelledError):
            await probe
        assert (await client.get(URL)).status_code == 200  # the slot came back
    assert transport.breakers["upstream.test"].state is State.CLOSED


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"recovery_timeout": "soon"}, "recovery_timeout"),
        ({"on_open": "ignore"}, "on_open"),
        ({"failure_statuses": {700}}, "failure_statuses"),
        ({"key": "host"}, "key"),
        ({"failure_exceptions": httpx.ReadTimeout}, "failure_exceptions"),
        ({"breaker": CircuitBreaker("x"), "key": lambda r: "k"}, "breaker"),
        ({"breaker_factory": CircuitBreaker, "failure_threshold": 3}, "breaker_factory"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs: dict[str, object], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        BreakerTransport(httpx.MockTransport(lambda r: httpx.Response(200)), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=word):
        AsyncBreakerTransport(httpx.MockTransport(lambda r: httpx.Response(200)), **kwargs)  # type: ignore[arg-type]


def test_half_open_admits_one_probe_among_concurrent_requests(clock: FakeClock) -> None:
    released = threading.Event()
    in_probe = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/trip":
            return httpx.Response(500)
        in_probe.set()
        released.wait(timeout=10)  # hold the probe until every other request was answered
        return httpx.Response(200)

    transport = BreakerTransport(
        httpx.MockTransport(handler), failure_threshold=1, recovery_timeout=5, clock=clock
    )
    outcomes: list[str] = []
    lock = threading.Lock()
    with httpx.Client(transport=transport) as client:
        client.get("http://upstream.test/trip")
        clock.advance(5)
        barrier = threading.Barrier(8)

        def request() -> None:
            barrier.wait(timeout=10)
            try:
                outcome = str(client.get(URL).status_code)
            except CircuitOpenError:
                outcome = "rejected"
            with lock:
                outcomes.append(outcome)
                if outcomes.count("rejected") == 7:
                    released.set()

        threads = [threading.Thread(target=request) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert in_probe.is_set()
    assert sorted(outcomes) == ["200"] + ["rejected"] * 7
    assert transport.breakers["upstream.test"].state is State.CLOSED

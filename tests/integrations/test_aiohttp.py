"""aiohttp: the client middleware and the trace-config fallback against a real server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from cascadebreaker import CircuitOpenError, State
from cascadebreaker.integrations.aiohttp import (
    BreakerMiddleware,
    breaker_trace_config,
    route_key,
)

from .conftest import FakeClock, Upstream


def middleware_session(breakers: BreakerMiddleware) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(middlewares=(breakers,))


def trace_session(breakers: BreakerMiddleware) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(trace_configs=[breaker_trace_config(breakers)])


SESSIONS: list[Callable[[BreakerMiddleware], aiohttp.ClientSession]] = [
    middleware_session,
    trace_session,
]


@pytest.mark.parametrize("make_session", SESSIONS, ids=["middleware", "trace-config"])
async def test_5xx_opens_4xx_does_not_and_rejection_sends_nothing(
    make_session: Callable[[BreakerMiddleware], aiohttp.ClientSession],
    upstream: Upstream,
    clock: FakeClock,
) -> None:
    breakers = BreakerMiddleware(failure_threshold=2, recovery_timeout=6, clock=clock)
    async with make_session(breakers) as session:
        for _ in range(3):
            async with session.get(upstream.url("/status/404")) as response:
                assert response.status == 404
        assert breakers.breakers[upstream.netloc].state is State.CLOSED
        for code in (500, 503):
            async with session.get(upstream.url(f"/status/{code}")) as response:
                assert response.status == code
        assert breakers.breakers[upstream.netloc].state is State.OPEN
        hits = upstream.hits
        with pytest.raises(CircuitOpenError) as info:
            await session.get(upstream.url("/status/200"))
        assert upstream.hits == hits
        assert info.value.retry_after == pytest.approx(6)
        clock.advance(6)
        async with session.get(upstream.url("/status/200")) as response:
            assert response.status == 200
        assert breakers.breakers[upstream.netloc].state is State.CLOSED


@pytest.mark.parametrize("make_session", SESSIONS, ids=["middleware", "trace-config"])
async def test_connection_errors_fail(
    make_session: Callable[[BreakerMiddleware], aiohttp.ClientSession], dead_url: str
) -> None:
    breakers = BreakerMiddleware(failure_threshold=2)
    async with make_session(breakers) as session:
        for _ in range(2):
            with pytest.raises(aiohttp.ClientConnectionError):
                await session.get(dead_url)
        with pytest.raises(CircuitOpenError):
            await session.get(dead_url)


async def test_per_route_breakers(upstream: Upstream) -> None:
    breakers = BreakerMiddleware(key=route_key, failure_threshold=1)
    async with middleware_session(breakers) as session:
        await session.get(upstream.url("/status/500"))
        with pytest.raises(CircuitOpenError):
            await session.get(upstream.url("/status/201"))
        async with session.get(upstream.url("/hello")) as response:
            assert response.status == 200
    assert f"{upstream.netloc} GET /status/{{id}}" in breakers.breakers


async def test_invalid_settings() -> None:
    kwargs: dict[str, Any] = {"failure_threshold": -1}
    with pytest.raises(ValueError, match="failure_threshold"):
        BreakerMiddleware(**kwargs)

"""The pytest plugin (entry point `pytest11: cascadebreaker`): fixtures and test isolation.

Loaded by pytest in every project that installs cascadebreaker, so it imports nothing beyond the
dependency-free core: no Redis client, no integration's library.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .clock import FakeClock
from .redis_server import RedisServer, RedisServerMissing, throwaway_redis
from .states import reset_breakers


def pytest_addoption(parser: pytest.Parser) -> None:
    """The `ccb_isolation` ini option."""
    parser.addini(
        "ccb_isolation",
        "reset every in-memory circuit breaker before each test (default: true)",
        type="bool",
        default=True,
    )


@pytest.fixture(autouse=True)
def _ccb_isolation(request: pytest.FixtureRequest) -> None:
    """Breakers that outlive a test (module globals) start the next one CLOSED and empty."""
    if request.config.getini("ccb_isolation"):
        reset_breakers()


@pytest.fixture
def ccb_clock() -> FakeClock:
    """A FakeClock starting at 1000.0; pass it as `CircuitBreaker(clock=...)`."""
    return FakeClock()


def _redis() -> Iterator[RedisServer]:
    try:
        with throwaway_redis() as server:
            yield server
    except RedisServerMissing as missing:
        # Under CI a missing server fails the test: a skipped Redis tier hides real gaps.
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}; CI must not skip Redis tests")
        pytest.skip(str(missing))


@pytest.fixture(scope="session")
def ccb_redis_session() -> Iterator[RedisServer]:
    """One redis-server for the whole session (use `ccb_redis_server` to get it flushed)."""
    yield from _redis()


@pytest.fixture
def ccb_redis_server(ccb_redis_session: RedisServer) -> RedisServer:
    """The session's redis-server, emptied (FLUSHALL) before this test."""
    ccb_redis_session.flush()
    return ccb_redis_session


@pytest.fixture
def ccb_own_redis_server() -> Iterator[RedisServer]:
    """A redis-server for this test alone, free to be stopped and restarted."""
    yield from _redis()

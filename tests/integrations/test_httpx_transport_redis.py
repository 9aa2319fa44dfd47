"""Per-host breakers shared through Redis: two clients (as two replicas would) see one breaker."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from cascadebreaker import CircuitOpenError, RedisStore, State
from cascadebreaker.integrations.httpx_transport import AsyncBreakerTransport, BreakerTransport

from .conftest import Upstream

pytestmark = pytest.mark.redis


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.01)


def test_a_trip_seen_by_one_replica_rejects_in_the_other(
    redis_server: Any, upstream: Upstream
) -> None:
    namespace = f"httpx-{uuid.uuid4().hex}"
    first_store = RedisStore.from_url(redis_server.url, namespace=namespace)
    second_store = RedisStore.from_url(redis_server.url, namespace=namespace)
    try:
        assert first_store.wait_ready() and second_store.wait_ready()
        first = BreakerTransport(store=first_store, failure_threshold=1, recovery_timeout=30)
        second = BreakerTransport(store=second_store, failure_threshold=1, recovery_timeout=30)
        with httpx.Client(transport=first) as a, httpx.Client(transport=second) as b:
            assert b.get(upstream.url("/")).status_code == 200  # b knows the host's breaker
            a.get(upstream.url("/status/500"))
            wait_for(lambda: second.breakers[upstream.netloc].state is State.OPEN)
            with pytest.raises(CircuitOpenError):
                b.get(upstream.url("/"))
        assert upstream.hits == 2
    finally:
        first_store.close()
        second_store.close()


async def test_async_transport_over_a_redis_store(redis_server: Any, upstream: Upstream) -> None:
    store = RedisStore.from_url(redis_server.url, namespace=f"httpx-{uuid.uuid4().hex}")
    try:
        transport = AsyncBreakerTransport(store=store, failure_threshold=2, recovery_timeout=30)
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(2):
                assert (await client.get(upstream.url("/status/503"))).status_code == 503
            with pytest.raises(CircuitOpenError):
                await client.get(upstream.url("/"))
    finally:
        store.close()

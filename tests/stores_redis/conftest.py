"""Fixtures for the RedisStore tests: stores that share state, cleaned up after each test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from cascadebreaker import MemoryStore, RedisStore
from cascadebreaker.stores.base import Store

StorePair = tuple[Store, Store]


def eventually(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Wait until `predicate()` is true; the timeout is a deadline, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {what or predicate}")
        time.sleep(0.002)


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_stores(redis_server: Any, namespace: str) -> Iterator[Callable[..., RedisStore]]:
    """Make RedisStores on the session's redis-server (same namespace unless told otherwise)."""
    made: list[RedisStore] = []

    def make(ns: str = namespace, **options: Any) -> RedisStore:
        store = RedisStore.from_url(redis_server.url, namespace=ns, **options)
        assert store.wait_ready(5.0)
        made.append(store)
        return store

    yield make
    with ThreadPoolExecutor() as pool:  # each close waits out its subscriber's poll: overlap them
        list(pool.map(RedisStore.close, made))


@pytest.fixture(params=["memory", "redis"])
def store_pair(request: pytest.FixtureRequest) -> StorePair:
    """Two stores sharing breaker state: one MemoryStore seen twice, or two RedisStores (two
    'processes') in one namespace."""
    if request.param == "memory":
        shared = MemoryStore()
        return shared, shared
    make = request.getfixturevalue("redis_stores")
    return make(), make()

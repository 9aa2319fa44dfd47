"""Many threads on two stores hammering one breaker with random outcomes: nothing unexpected is
raised, and once the calls stop every local view converges on the shared state in Redis."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from cascadebreaker import CircuitBreaker, CircuitOpenError, RedisStore

from .conftest import eventually

pytestmark = [pytest.mark.redis, pytest.mark.slow]


class Boom(RuntimeError):
    """The upstream failed."""


def hammer(breaker: CircuitBreaker, seed: int, stop: threading.Event, errors: list[str]) -> None:
    rng = random.Random(seed)

    def upstream() -> str:
        if rng.random() < 0.3:
            raise Boom("down")
        return "ok"

    while not stop.is_set():
        try:
            if rng.random() < 0.5:
                breaker.call(upstream)
            else:
                with breaker:
                    upstream()
        except (Boom, CircuitOpenError):
            pass
        except Exception as exc:  # anything else is a bug
            errors.append(repr(exc))


def test_views_converge_after_a_storm(redis_stores: Callable[..., RedisStore]) -> None:
    stores = [redis_stores(), redis_stores()]
    settings = {"failure_threshold": 3, "recovery_timeout": 0.05, "half_open_max_calls": 2}
    breakers = [CircuitBreaker("storm", store=s, **settings) for s in stores]
    stop, errors = threading.Event(), []
    threads = [
        threading.Thread(target=hammer, args=(breakers[i % 2], i, stop, errors)) for i in range(8)
    ]
    for thread in threads:
        thread.start()
    actions = ["reset", "force_open", "reset", "disable", "reset", "force_open", "reset"]
    for i, action in enumerate(actions):  # manual control, from either side, mid-storm
        time.sleep(0.15)
        getattr(breakers[i % 2], action)()
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert sum(b.snapshot()["calls"]["failure"] for b in breakers) > 0

    eventually(lambda: converged_on_redis(stores, breakers), what="views equal the shared state")


def converged_on_redis(stores: list[RedisStore], breakers: list[CircuitBreaker]) -> bool:
    """Every breaker's view (state, mode, version) equals the shared hash."""
    raw = stores[0].client.hmget(stores[0].key("storm"), "state", "mode", "version")
    if raw[0] is None:
        return False
    shared = (raw[0].decode(), raw[1].decode(), int(raw[2]))  # type: ignore[union-attr]
    views = [
        (b._slot.machine.state.value, b.snapshot()["mode"], b.snapshot()["version"])
        for b in breakers
    ]
    return all(view == shared for view in views)


def test_a_storm_through_a_redis_outage(own_redis_server: Any, namespace: str) -> None:
    stores = [RedisStore.from_url(own_redis_server.url, namespace=namespace) for _ in range(2)]
    try:
        for store in stores:
            assert store.wait_ready()
        settings = {"failure_threshold": 3, "recovery_timeout": 0.05, "half_open_max_calls": 2}
        breakers = [CircuitBreaker("storm", store=s, **settings) for s in stores]
        stop, errors = threading.Event(), []
        threads = [
            threading.Thread(target=hammer, args=(breakers[i % 2], i, stop, errors))
            for i in range(6)
        ]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        own_redis_server.stop()  # mid-storm: trips, probes and closes go on locally
        time.sleep(0.3)
        own_redis_server.start()
        eventually(lambda: all(s.online for s in stores), timeout=10.0, what="both back online")
        time.sleep(0.3)
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        assert errors == []  # no Redis error ever reached a caller
        eventually(lambda: converged_on_redis(stores, breakers), what="views converge again")
    finally:
        for store in stores:
            store.close()

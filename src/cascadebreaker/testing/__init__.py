"""Test helpers for code that uses cascadebreaker (and the pytest plugin that ships them).

    from cascadebreaker.testing import FakeClock, trip, half_open, assert_state, assert_rejects

With pytest, the plugin (registered as the `cascadebreaker` pytest11 entry point) adds fixtures:
`ccb_clock` (a FakeClock), `ccb_redis_server` (a throwaway redis-server for the session, flushed
before each test that asks for it) and `ccb_own_redis_server` (one for a single test, free to
kill); and it resets every in-memory breaker before each test (`ccb_isolation = false` in the
pytest ini options turns that off).
"""

from __future__ import annotations

from .clock import FakeClock
from .redis_server import RedisServer, RedisServerMissing, free_port, throwaway_redis
from .states import assert_rejects, assert_state, half_open, reset_breakers, trip

__all__ = [
    "FakeClock",
    "RedisServer",
    "RedisServerMissing",
    "assert_rejects",
    "assert_state",
    "free_port",
    "half_open",
    "reset_breakers",
    "throwaway_redis",
    "trip",
]

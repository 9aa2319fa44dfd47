"""The shipped pytest plugin, run the way a user's project runs it: pytest in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cascadebreaker import CircuitBreaker, CircuitOpenError, State
from cascadebreaker.testing import (
    FakeClock,
    assert_rejects,
    assert_state,
    half_open,
    reset_breakers,
    throwaway_redis,
    trip,
)

USER_TESTS = """
import redis
from cascadebreaker import CircuitBreaker, RedisStore, State
from cascadebreaker.testing import assert_state, trip

payments = CircuitBreaker("payments", failure_threshold=1)  # a module global, as apps have


def test_first_leaves_the_global_open():
    trip(payments)
    assert_state(payments, State.OPEN)


def test_second_starts_closed_again():
    assert_state(payments, State.CLOSED)


def test_clock_fixture_moves_a_breaker(ccb_clock):
    breaker = CircuitBreaker("clocked", failure_threshold=1, recovery_timeout=5, clock=ccb_clock)
    trip(breaker)
    ccb_clock.advance(5)
    breaker.acquire().success()
    assert_state(breaker, "CLOSED")


def test_redis_fixture_is_real_and_flushed(ccb_redis_server):
    client = redis.Redis.from_url(ccb_redis_server.url)
    assert client.dbsize() == 0
    client.set("left-behind", "1")
    store = RedisStore(client)
    trip(CircuitBreaker("shared", failure_threshold=1, store=store))
    store.close()


def test_the_next_test_sees_an_empty_server(ccb_redis_server):
    assert redis.Redis.from_url(ccb_redis_server.url).dbsize() == 0


def test_own_server_can_be_stopped(ccb_own_redis_server):
    ccb_own_redis_server.stop()
    ccb_own_redis_server.start()
    assert redis.Redis.from_url(ccb_own_redis_server.url).ping()
"""


def run_pytest(
    where: Path, *args: str, only_ours: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    if only_ours:  # other installed plugins (schemathesis imports requests) must not count
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        args = ("-p", "cascadebreaker.testing.plugin", *args)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.redis
def test_the_plugin_loads_by_entry_point_and_isolates_tests(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    result = run_pytest(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 passed" in result.stdout


def test_isolation_can_be_turned_off(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nccb_isolation = false\n")
    tests = USER_TESTS.split("def test_clock_fixture")[0]
    (tmp_path / "test_user.py").write_text(tests)
    result = run_pytest(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "test_second_starts_closed_again" in result.stdout


def test_the_plugin_imports_no_integration_library(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(
        textwrap.dedent(
            """
            import sys

            def test_nothing_imported():
                assert "cascadebreaker.testing.plugin" in sys.modules
                heavy = {"redis", "requests", "grpc", "celery", "opentelemetry", "flask"}
                assert not heavy & set(sys.modules)
            """
        )
    )
    result = run_pytest(tmp_path, only_ours=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_state_helpers(clock: FakeClock) -> None:
    breaker = CircuitBreaker("helpers", failure_threshold=3, recovery_timeout=4, clock=clock)
    with pytest.raises(AssertionError, match="is CLOSED, expected OPEN"):
        assert_state(breaker, State.OPEN)
    with pytest.raises(AssertionError, match="admitted a call"):
        assert_rejects(breaker)
    probe = half_open(breaker, clock)
    assert_state(breaker, State.HALF_OPEN)
    assert isinstance(assert_rejects(breaker), CircuitOpenError)  # the one probe is out
    probe.failure()
    assert assert_rejects(breaker).retry_after == pytest.approx(4)
    assert reset_breakers() >= 1
    assert_state(breaker, State.CLOSED)


def test_trip_works_with_a_rate_policy() -> None:
    from cascadebreaker import CountWindow, FailureRate

    policy = FailureRate(CountWindow(20), rate=0.5, minimum_calls=10)
    breaker = CircuitBreaker("rate", policy=policy)
    trip(breaker)
    assert_state(breaker, State.OPEN)


def test_fake_clock_refuses_to_go_back() -> None:
    with pytest.raises(ValueError, match="monotonic"):
        FakeClock().advance(-1)


@pytest.mark.redis
def test_throwaway_redis_cleans_up() -> None:
    with throwaway_redis() as server:
        server.flush()
        workdir = server.workdir
        assert Path(workdir).is_dir()
    assert server.process.poll() is not None
    assert not Path(workdir).exists()

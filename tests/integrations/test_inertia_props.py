"""Guarded Inertia props: the degraded-result dict for every way a call can go (no Django here)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from cascadebreaker import CircuitBreaker, FallbackReason, MemoryStore
from cascadebreaker.integrations.inertia import (
    REASON_CIRCUIT_OPEN,
    REASON_FAILED_RESULT,
    REASON_UPSTREAM_ERROR,
    GuardedProp,
    StaleCache,
    guarded_prop,
)

from .conftest import FakeClock

KEYS = {"data", "isDegraded", "circuitState", "reasonCode", "reason", "retryAfter", "stale", "asOf"}


class Api:
    """A fake upstream call that counts its calls and fails on demand."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False
        self.rows: list[dict[str, Any]] = [{"id": "stl_1", "amount": 1200}]

    def __call__(self) -> list[dict[str, Any]]:
        self.calls += 1
        if self.down:
            raise ConnectionError("settlement API unreachable")
        return self.rows


@pytest.fixture
def api() -> Api:
    return Api()


def breaker(clock: FakeClock, **settings: Any) -> CircuitBreaker:
    settings.setdefault("failure_threshold", 2)
    settings.setdefault("recovery_timeout", 8.0)
    return CircuitBreaker("settlement-api", clock=clock, store=MemoryStore(), **settings)


def test_a_healthy_call_gives_its_data_closed_and_not_degraded(api: Api, clock: FakeClock) -> None:
    value = guarded_prop(breaker(clock), api)()

    assert set(value) == KEYS
    assert value["data"] == api.rows
    assert (value["isDegraded"], value["circuitState"], value["reason"]) == (False, "CLOSED", None)
    assert value["retryAfter"] == 0.0
    assert value["stale"] is False and isinstance(value["asOf"], float)
    json.dumps(value)  # the adapter serialises it as is


def test_nothing_is_called_until_the_prop_is_evaluated(api: Api, clock: FakeClock) -> None:
    prop = guarded_prop(breaker(clock), api)

    assert api.calls == 0
    prop()
    prop()
    assert api.calls == 2


def test_a_failure_below_the_threshold_is_degraded_but_closed(api: Api, clock: FakeClock) -> None:
    api.down = True

    value = guarded_prop(breaker(clock), api)()

    assert value == {
        "data": None,
        "isDegraded": True,
        "circuitState": "CLOSED",
        "reasonCode": "upstream_error",
        "reason": REASON_UPSTREAM_ERROR,
        "retryAfter": 0.0,
        "stale": False,
        "asOf": None,
    }


def test_the_failure_that_opens_the_circuit_reports_open_and_the_full_wait(
    api: Api, clock: FakeClock
) -> None:
    api.down = True
    prop = guarded_prop(breaker(clock, failure_threshold=2, recovery_timeout=8.0), api)
    prop()

    value = prop()

    assert (value["circuitState"], value["reason"], value["retryAfter"]) == (
        "OPEN",
        REASON_UPSTREAM_ERROR,
        8.0,
    )


def test_an_open_circuit_answers_without_calling_and_counts_down(
    api: Api, clock: FakeClock
) -> None:
    api.down = True
    prop = guarded_prop(breaker(clock, failure_threshold=1, recovery_timeout=8.0), api)
    prop()
    calls = api.calls
    clock.advance(3.0)

    value = prop()

    assert api.calls == calls
    assert (value["isDegraded"], value["circuitState"], value["reason"]) == (
        True,
        "OPEN",
        REASON_CIRCUIT_OPEN,
    )
    assert value["retryAfter"] == pytest.approx(5.0)


def test_after_retry_after_the_probe_runs_and_a_success_closes(api: Api, clock: FakeClock) -> None:
    api.down = True
    prop = guarded_prop(breaker(clock, failure_threshold=1, recovery_timeout=8.0), api)
    prop()
    api.down = False
    clock.advance(8.0)

    value = prop()

    assert (value["isDegraded"], value["circuitState"], value["data"]) == (
        False,
        "CLOSED",
        api.rows,
    )


def test_busy_half_open_probes_reject_as_circuit_open(api: Api, clock: FakeClock) -> None:
    b = breaker(clock, failure_threshold=1, recovery_timeout=1.0)
    with pytest.raises(ConnectionError):
        b.call(_raise)
    clock.advance(1.0)
    probe = b.acquire()  # the one half-open probe, still running

    value = guarded_prop(b, api)()

    assert api.calls == 0
    assert (value["circuitState"], value["reason"]) == ("HALF_OPEN", REASON_CIRCUIT_OPEN)
    probe.success()


def test_a_forced_open_circuit_has_no_retry_time(api: Api, clock: FakeClock) -> None:
    b = breaker(clock)
    b.force_open()

    value = guarded_prop(b, api)()

    assert (value["reason"], value["retryAfter"]) == (REASON_CIRCUIT_OPEN, None)
    json.dumps(value, allow_nan=False)


def test_a_failed_result_is_degraded_with_its_own_reason(clock: FakeClock) -> None:
    b = breaker(clock, result_is_failure=lambda r: r.get("status", 200) >= 500)

    value = guarded_prop(b, lambda: {"status": 503})()

    assert (value["isDegraded"], value["reason"], value["data"]) == (
        True,
        REASON_FAILED_RESULT,
        None,
    )


def test_the_last_good_value_is_served_marked_stale(api: Api, clock: FakeClock) -> None:
    wall = FakeClock()
    cache = StaleCache(clock=wall)
    prop = guarded_prop(breaker(clock, failure_threshold=1), api, stale=cache, key="2026-01-05")
    fresh = prop()
    api.down = True
    wall.advance(30.0)

    value = prop()

    assert fresh["asOf"] == 1000.0
    assert (value["data"], value["isDegraded"], value["stale"], value["asOf"]) == (
        api.rows,
        True,
        True,
        1000.0,
    )
    assert prop()["reason"] == REASON_CIRCUIT_OPEN  # still the stale rows while open
    assert prop()["data"] == api.rows


def test_stale_values_are_kept_per_key(api: Api, clock: FakeClock) -> None:
    cache = StaleCache()
    b = breaker(clock, failure_threshold=1)
    guarded_prop(b, api, stale=cache, key="monday")()
    api.down = True

    other_day = guarded_prop(b, api, stale=cache, key="tuesday")()

    assert (other_day["data"], other_day["stale"]) == (None, False)


def test_a_fallback_wins_over_the_stale_value_and_hears_why(api: Api, clock: FakeClock) -> None:
    heard: list[FallbackReason] = []
    cache = StaleCache()
    b = breaker(clock, failure_threshold=1)
    guarded_prop(b, api, stale=cache)()
    api.down = True

    def fallback(reason: FallbackReason) -> list[str]:
        heard.append(reason)
        return ["placeholder"]

    value = guarded_prop(b, api, stale=cache, fallback=fallback)()

    assert (value["data"], value["stale"], value["asOf"]) == (["placeholder"], False, None)
    assert isinstance(heard[0].exception, ConnectionError)


def test_an_exception_the_breaker_ignores_propagates(clock: FakeClock) -> None:
    b = breaker(clock, ignore_exceptions=(KeyError,))

    with pytest.raises(KeyError):
        guarded_prop(b, lambda: {}["missing"])()


def test_stale_cache_drops_the_oldest_entries_and_old_values() -> None:
    wall = FakeClock()
    cache = StaleCache(max_entries=2, max_age=60.0, clock=wall)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)

    assert cache.get("a") is None
    assert cache.get("b") == (2, 1000.0)
    wall.advance(61.0)
    assert cache.get("c") is None
    cache.clear()
    assert cache.get("b") is None


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"max_entries": 0}, "max_entries"),
        ({"max_age": -1}, "max_age"),
        ({"max_age": True}, "max_age"),
    ],
)
def test_stale_cache_rejects_bad_settings(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        StaleCache(**settings)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"breaker": object()}, "breaker"),
        ({"fetch": 42}, "fetch"),
        ({"fallback": "none"}, "fallback"),
        ({"stale": {}}, "stale"),
        ({"key": ["unhashable"]}, "key"),
    ],
)
def test_bad_arguments_name_the_field(
    arguments: dict[str, Any], field: str, api: Api, clock: FakeClock
) -> None:
    given: dict[str, Any] = {"breaker": breaker(clock), "fetch": api, **arguments}
    with pytest.raises(ValueError, match=field):
        GuardedProp(given.pop("breaker"), given.pop("fetch"), **given)


def _raise() -> None:
    raise ConnectionError("down")


def test_the_library_and_the_props_load_without_django() -> None:
    # The `django` extra is optional: importing the package or guarded props must not need it.
    code = (
        "import sys, cascadebreaker, cascadebreaker.integrations.inertia; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'inertia')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

"""Why a call was refused, and what a front end or dashboard can read: reason codes, the last
failure, retry_after on degraded results, the snapshot, and fallbacks on the decorator."""

from __future__ import annotations

import json
import math
import pickle

import pytest

from cascadebreaker import (
    CircuitBreaker,
    CircuitOpenError,
    ConsecutiveFailures,
    CountWindow,
    FailureRate,
    FallbackReason,
    Permit,
    Reason,
    Scope,
    State,
)

from .conftest import FakeClock


class Down(ConnectionError):
    pass


def boom() -> None:
    raise Down("payment-db refused the connection")


@pytest.fixture
def breaker(clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker("payment", failure_threshold=2, recovery_timeout=10.0, clock=clock)


def trip(b: CircuitBreaker) -> None:
    for _ in range(2):
        with pytest.raises(Down):
            b.call(boom)


def test_circuit_open_error_names_the_reason_and_the_last_failure(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    trip(breaker)
    clock.advance(3.0)
    with pytest.raises(CircuitOpenError) as info:
        breaker.call(lambda: "not run")
    err = info.value
    assert err.reason == Reason.CONSECUTIVE_FAILURES == "consecutive_failures"
    assert err.detail == "2 consecutive failures"
    assert err.last_failure is not None
    assert (err.last_failure.type, err.last_failure.message) == (
        "Down",
        "payment-db refused the connection",
    )
    assert err.scope is Scope.LOCAL
    assert err.retry_after == pytest.approx(7.0)
    assert "consecutive_failures" in str(err)
    copy = pickle.loads(pickle.dumps(err))  # crosses process boundaries (Celery, multiprocessing)
    assert (copy.reason, copy.last_failure, copy.scope) == (err.reason, err.last_failure, err.scope)


def test_reasons_while_half_open_and_forced_open(clock: FakeClock) -> None:
    b = CircuitBreaker("p", failure_threshold=1, recovery_timeout=1.0, clock=clock)
    with pytest.raises(Down):
        b.call(boom)
    clock.advance(1.0)
    probe = b.acquire()
    with pytest.raises(CircuitOpenError) as busy:
        b.acquire()
    assert busy.value.state is State.HALF_OPEN and busy.value.reason == Reason.PROBE_BUDGET
    probe.failure(Down("still down"))
    assert b.snapshot().reason == Reason.PROBE_FAILED
    assert b.snapshot().last_failure is not None
    assert b.snapshot().last_failure.message == "still down"  # type: ignore[union-attr]
    b.force_open()
    with pytest.raises(CircuitOpenError) as forced:
        b.call(lambda: None)
    assert forced.value.reason == Reason.FORCED_OPEN and math.isinf(forced.value.retry_after)


def test_a_rate_policy_trip_says_so(clock: FakeClock) -> None:
    rate = FailureRate(window=CountWindow(4), rate=0.5, minimum_calls=4)
    b = CircuitBreaker("rate", policy=[ConsecutiveFailures(100), rate], clock=clock)
    b.call(lambda: 1)
    b.call(lambda: 1)
    for _ in range(2):
        with pytest.raises(Down):
            b.call(boom)
    with pytest.raises(CircuitOpenError) as info:
        b.call(lambda: 1)
    assert info.value.reason == Reason.FAILURE_RATE
    assert info.value.detail == "failures 2/4 >= 50%"


def test_fallback_reason_carries_code_last_failure_and_retry(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    seen: list[FallbackReason] = []

    def fallback(reason: FallbackReason) -> str:
        seen.append(reason)
        return "cached"

    assert breaker.call(boom, fallback=fallback) == "cached"
    ran = seen[-1]
    assert ran.reason == Reason.CALL_FAILED and not ran.rejected
    assert ran.last_failure is not None and ran.last_failure.type == "Down"
    assert breaker.call(boom, fallback=fallback) == "cached"  # trips
    clock.advance(4.0)
    assert breaker.call(lambda: "live", fallback=fallback) == "cached"
    refused = seen[-1]
    assert refused.rejected and refused.reason == Reason.CONSECUTIVE_FAILURES
    assert refused.retry_after == pytest.approx(6.0)
    assert refused.last_failure is not None and refused.last_failure.type == "Down"


def test_a_failed_result_is_not_a_rejection(clock: FakeClock) -> None:
    b = CircuitBreaker("r", clock=clock, result_is_failure=lambda r: r == 503)
    seen: list[FallbackReason] = []
    assert b.call(lambda: 503, fallback=lambda r: seen.append(r) or "fb") == "fb"
    assert seen[0].reason == Reason.CALL_FAILED and not seen[0].rejected
    assert seen[0].exception is None
    assert b.guard(lambda: 503).to_dict()["reasonCode"] == "failed_result"
    assert "returned a failed result" in seen[0].describe()
    assert b.snapshot().last_failure is not None
    assert b.snapshot().last_failure.describe() == "int: 503"  # type: ignore[union-attr]


def test_guarded_result_tells_the_front_end_when_to_retry(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    failed = breaker.guard(boom)
    assert failed.retry_after == 0.0 and failed.reason_code == Reason.CALL_FAILED
    breaker.guard(boom)
    clock.advance(2.5)
    refused = breaker.guard(lambda: "never")
    body = refused.to_dict()
    assert body["isDegraded"] is True and body["circuitState"] == "OPEN"
    assert body["retryAfter"] == pytest.approx(7.5)
    assert (body["reasonCode"], body["trippedBy"]) == ("circuit_open", "consecutive_failures")
    json.dumps(body)  # plain JSON
    breaker.force_open()
    forced = breaker.guard(lambda: "never")
    assert forced.retry_after is None and forced.to_dict()["retryAfter"] is None


def test_snapshot_is_typed_read_only_and_json(breaker: CircuitBreaker, clock: FakeClock) -> None:
    breaker.call(lambda: 1)
    with pytest.raises(Down):
        breaker.call(boom)
    snap = breaker.snapshot()
    assert snap.state is State.CLOSED and snap.scope is Scope.LOCAL
    assert snap.windows[0].policy == "consecutive_failures"
    assert (snap.windows[0].calls, snap.windows[0].hits) == (1, 1)  # the current run
    assert snap.calls.success == 1 and snap.calls.failure == 1
    assert snap.opened_at is None and snap.retry_after == 0.0
    with pytest.raises(AttributeError):
        snap.state = State.OPEN  # type: ignore[misc]
    with pytest.raises(Down):
        breaker.call(boom)
    clock.advance(1.0)
    snap = breaker.snapshot()
    assert snap.state is State.OPEN and snap.reason == "consecutive_failures"
    assert snap.opened_at == pytest.approx(clock.now - 1.0)
    assert snap.retry_after == pytest.approx(9.0)
    body = json.loads(json.dumps(snap.to_dict()))
    assert body["retryAfter"] == pytest.approx(9.0)
    assert body["lastFailure"] == {"type": "Down", "message": "payment-db refused the connection"}
    assert body["scope"] == "local" and body["windows"][0]["policy"] == "consecutive_failures"
    # it reads like the dict snapshot() used to return
    assert snap["calls"]["failure"] == 2 and snap["state"] == "OPEN" and dict(snap) == body


def test_snapshot_counts_probes_out(clock: FakeClock) -> None:
    b = CircuitBreaker("p", failure_threshold=1, half_open_max_calls=3, clock=clock)
    with pytest.raises(Down):
        b.call(boom)
    clock.advance(30.0)
    permits = [b.acquire(), b.acquire()]
    assert b.snapshot().probes_out == 2 and b.snapshot().state is State.HALF_OPEN
    permits[0].ignore()
    assert b.snapshot().probes_out == 1


def test_protect_with_a_fallback(breaker: CircuitBreaker) -> None:
    reasons: list[FallbackReason] = []

    @breaker.protect(fallback=lambda r: reasons.append(r) or "cached")
    def price(item: str) -> str:
        if item == "broken":
            raise Down("no price")
        return f"price of {item}"

    assert price("tea") == "price of tea"
    assert price.__name__ == "price"
    assert price("broken") == "cached" and reasons[-1].reason == Reason.CALL_FAILED
    assert price("broken") == "cached"  # the second failure trips
    assert price("tea") == "cached"  # rejected: the fallback answers
    assert reasons[-1].rejected and reasons[-1].reason == Reason.CONSECUTIVE_FAILURES

    @breaker.protect
    def plain() -> str:
        return "ran"

    with pytest.raises(CircuitOpenError):
        plain()


async def test_protect_with_an_async_fallback(breaker: CircuitBreaker) -> None:
    async def fallback(reason: FallbackReason) -> str:
        return f"fallback ({reason.reason})"

    @breaker.protect(fallback=fallback)
    async def quote() -> str:
        raise Down("no quote")

    assert await quote() == "fallback (call_failed)"
    assert await quote() == "fallback (call_failed)"
    assert breaker.state is State.OPEN
    assert await quote() == "fallback (consecutive_failures)"


def four_probes_judged_by_their_failure_rate(
    clock: FakeClock,
) -> tuple[CircuitBreaker, list[Permit]]:
    b = CircuitBreaker(
        "w",
        failure_threshold=1,
        recovery_timeout=5.0,
        half_open_max_calls=4,
        half_open_failure_rate=0.5,
        clock=clock,
    )
    with pytest.raises(Down):
        b.call(boom)
    clock.advance(5.0)
    return b, [b.acquire() for _ in range(4)]


def test_half_open_judged_by_a_window_of_probes(clock: FakeClock) -> None:
    b, probes = four_probes_judged_by_their_failure_rate(clock)
    probes[0].failure(Down())  # one of four failed: not yet a verdict
    assert b.state is State.HALF_OPEN
    probes[1].success()
    probes[2].success()  # 1 failure, 1 left: at most 2/4 = 50% -> could still reopen
    assert b.state is State.HALF_OPEN
    probes[3].success()
    assert b.state is State.CLOSED and b.snapshot().detail == "3/4 probes succeeded"


def test_a_window_of_probes_reopens_on_its_failure_rate(clock: FakeClock) -> None:
    b, probes = four_probes_judged_by_their_failure_rate(clock)
    probes[0].success()
    probes[1].failure(Down())
    assert b.state is State.HALF_OPEN
    probes[2].failure(Down())  # 2/4 failed: certain
    assert b.state is State.OPEN and b.snapshot().reason == Reason.PROBE_FAILED
    probes[3].success()  # stale now
    assert b.state is State.OPEN


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("probe_timeout", 0),
        ("probe_timeout", "10"),
        ("half_open_failure_rate", 0.0),
        ("half_open_failure_rate", 1.5),
    ],
)
def test_bad_half_open_settings_name_the_setting(setting: str, value: object) -> None:
    with pytest.raises(ValueError, match=setting):
        CircuitBreaker("bad", **{setting: value})  # type: ignore[arg-type]

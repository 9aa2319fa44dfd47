"""One contract, two stores: the same behaviour from MemoryStore and from RedisStore.

Each test builds two breakers with the same name on a pair of stores that share state (one
MemoryStore seen twice, or two RedisStores in one namespace, like two processes). Time is real:
recovery timeouts are short and waits are deadlines, never timing assertions.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from cascadebreaker import (
    CircuitBreaker,
    CircuitOpenError,
    CountWindow,
    ExponentialBackoff,
    FailureRate,
    FallbackReason,
    State,
)
from cascadebreaker.events import TransitionEvent
from cascadebreaker.permit import Permit

from .conftest import StorePair, eventually

pytestmark = pytest.mark.redis
RECOVERY = 0.2  # for tests that wait out the open state
LONG = 30.0  # for tests that must see it rejecting, however slow the machine


class Boom(RuntimeError):
    """The upstream failed."""


def boom() -> None:
    raise Boom("upstream down")


def pair(stores: StorePair, **settings: Any) -> tuple[CircuitBreaker, CircuitBreaker]:
    """Two breakers named 'upstream' sharing state through `stores`."""
    settings.setdefault("failure_threshold", 2)
    settings.setdefault("recovery_timeout", RECOVERY)
    first, second = stores
    return (
        CircuitBreaker("upstream", store=first, **settings),
        CircuitBreaker("upstream", store=second, **settings),
    )


def trip(breaker: CircuitBreaker, failures: int = 2) -> None:
    for _ in range(failures):
        with pytest.raises(Boom):
            breaker.call(boom)


def acquire_when_admitted(breaker: CircuitBreaker, timeout: float = 5.0) -> Permit:
    """Acquire a permit as soon as the breaker admits one (its open wait may still run)."""
    permits: list[Permit] = []

    def admitted() -> bool:
        try:
            permits.append(breaker.acquire())
        except CircuitOpenError:
            return False
        return True

    eventually(admitted, timeout, f"{breaker!r} admits a call")
    return permits[0]


def test_closed_open_half_open_closed(store_pair: StorePair) -> None:
    a, b = pair(store_pair)
    events: list[TransitionEvent] = []
    a.add_listener(events.append)
    assert a.state is State.CLOSED and b.state is State.CLOSED
    trip(a)
    assert a.state is State.OPEN
    eventually(lambda: b.state is State.OPEN, what="the trip reaches the other breaker")
    probe = acquire_when_admitted(b)
    assert probe.probe
    assert b.state is State.HALF_OPEN
    probe.success()
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="both close")
    # Listeners hear a move just after it is made (outside the slot's lock): wait for it.
    eventually(lambda: events[-1].to_state is State.CLOSED, what="a's listener hears the close")
    assert events[0].from_state is State.CLOSED and events[0].to_state is State.OPEN
    assert b.call(lambda: 42) == 42


def test_open_rejects_naming_breaker_state_and_wait(store_pair: StorePair) -> None:
    a, b = pair(store_pair, recovery_timeout=LONG)
    trip(a)
    eventually(lambda: b.state is State.OPEN, what="the trip reaches the other breaker")
    ran: list[bool] = []
    with pytest.raises(CircuitOpenError) as rejected:
        b.call(lambda: ran.append(True))
    assert not ran
    assert rejected.value.name == "upstream"
    assert rejected.value.state is State.OPEN
    assert 0.0 < rejected.value.retry_after <= LONG
    assert 0.0 < b.retry_after <= LONG


def test_probe_failure_reopens(store_pair: StorePair) -> None:
    # The first opening is short so the probe comes soon; the second is long.
    backoff = ExponentialBackoff(
        initial=RECOVERY, maximum=LONG, multiplier=LONG / RECOVERY, jitter=0
    )
    a, b = pair(store_pair, backoff=backoff)
    trip(a)
    probe = acquire_when_admitted(a)
    probe.failure(Boom("still down"))
    assert a.state is State.OPEN
    eventually(lambda: b.state is State.OPEN and b.retry_after > 0, what="b sees the reopen")
    with pytest.raises(CircuitOpenError):
        b.call(lambda: None)


def test_probe_budget_is_shared(store_pair: StorePair) -> None:
    a, b = pair(store_pair, half_open_max_calls=2)
    trip(a)
    first = acquire_when_admitted(a)
    second = acquire_when_admitted(b)
    assert first.probe and second.probe
    for breaker in (a, b, a, b):
        with pytest.raises(CircuitOpenError):
            breaker.acquire()  # the budget of two is spent
    first.ignore()  # frees its slot without counting
    third = acquire_when_admitted(a)
    assert third.probe
    second.success()
    third.success()
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="both close")


def test_failures_count_across_sharers(store_pair: StorePair) -> None:
    a, b = pair(store_pair, failure_threshold=2, recovery_timeout=LONG)
    with pytest.raises(Boom):
        a.call(boom)
    with pytest.raises(Boom):
        b.call(boom)
    eventually(
        lambda: a.state is State.OPEN and b.state is State.OPEN, what="one failure each trips"
    )


def test_a_rate_policy_trip_reaches_every_sharer(store_pair: StorePair) -> None:
    rate = FailureRate(window=CountWindow(10), rate=0.5, minimum_calls=4)
    a, b = pair(store_pair, policy=rate, recovery_timeout=LONG)
    for _ in range(2):
        assert a.call(lambda: "ok") == "ok"
    for _ in range(2):
        with pytest.raises(Boom):
            a.call(boom)
    assert a.state is State.OPEN  # 2 of 4 calls failed
    eventually(lambda: b.state is State.OPEN, what="b sees the rate trip")


def test_fallbacks(store_pair: StorePair) -> None:
    a, b = pair(store_pair, recovery_timeout=LONG)
    reasons: list[FallbackReason] = []

    def fallback(reason: FallbackReason) -> str:
        reasons.append(reason)
        return "cached"

    assert a.call(boom, fallback=fallback) == "cached"
    assert isinstance(reasons[0].exception, Boom)
    assert a.call(boom, fallback=fallback) == "cached"
    eventually(lambda: b.state is State.OPEN, what="b sees the trip")
    assert b.call(lambda: "not run", fallback=fallback) == "cached"
    assert reasons[-1].state is State.OPEN
    assert reasons[-1].exception is None
    assert b.call(lambda: None, fallback=fallback) == "cached"  # still open: no call made


def test_null_result_is_not_degraded(store_pair: StorePair) -> None:
    a, _ = pair(store_pair)
    result = a.guard(lambda: None)
    assert result.data is None and not result.is_degraded
    assert result.circuit_state is State.CLOSED


def test_manual_control_propagates(store_pair: StorePair) -> None:
    a, b = pair(store_pair, recovery_timeout=LONG)
    a.force_open()
    eventually(lambda: b.state is State.OPEN, what="b sees force_open")
    with pytest.raises(CircuitOpenError) as rejected:
        b.call(lambda: None)
    assert math.isinf(rejected.value.retry_after)

    a.reset()
    eventually(lambda: b.state is State.CLOSED, what="b sees reset")
    assert b.call(lambda: "ok") == "ok"

    b.disable()
    eventually(lambda: a.snapshot()["mode"] == "DISABLED", what="a sees disable")
    for _ in range(5):
        with pytest.raises(Boom):
            a.call(boom)  # disabled: every call runs, nothing trips
    assert a.state is State.CLOSED

    b.reset()
    eventually(lambda: a.snapshot()["mode"] == "NORMAL", what="a sees the reset")
    trip(a)
    eventually(lambda: b.state is State.OPEN, what="normal again: failures trip")


async def test_async_calls(store_pair: StorePair) -> None:
    a, b = pair(store_pair)

    async def afail() -> None:
        raise Boom("async upstream down")

    async def aok() -> str:
        return "ok"

    assert await a.acall(aok) == "ok"
    for _ in range(2):
        with pytest.raises(Boom):
            await a.acall(afail)
    deadline = asyncio.get_running_loop().time() + 5.0
    while b.state is not State.OPEN:
        assert asyncio.get_running_loop().time() < deadline, "b sees the trip"
        await asyncio.sleep(0.002)
    while True:  # wait out the open period, then the probe closes the circuit
        try:
            assert await b.acall(aok) == "ok"
            break
        except CircuitOpenError:
            assert asyncio.get_running_loop().time() < deadline + RECOVERY, "probe admitted"
            await asyncio.sleep(0.01)
    while a.state is not State.CLOSED:
        assert asyncio.get_running_loop().time() < deadline + 2 * RECOVERY, "a sees the close"
        await asyncio.sleep(0.002)


async def test_async_rejection_and_fallback(store_pair: StorePair) -> None:
    a, b = pair(store_pair, recovery_timeout=LONG)

    async def afail() -> None:
        raise Boom("async upstream down")

    async def afallback(reason: FallbackReason) -> str:
        return f"fallback while {reason.state.value}"

    for _ in range(2):
        with pytest.raises(Boom):
            await a.acall(afail)
    async with asyncio.timeout(5.0):
        while b.state is not State.OPEN:  # noqa: ASYNC110 - set by another thread; poll it
            await asyncio.sleep(0.002)
    with pytest.raises(CircuitOpenError):
        await b.acall(afail)
    assert await b.acall(afail, fallback=afallback) == "fallback while OPEN"

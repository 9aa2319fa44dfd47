"""Drive a breaker into a state through its public API, and assert where it is."""

from __future__ import annotations

from ..breaker import CircuitBreaker, live_breakers
from ..core.state import State
from ..errors import CircuitOpenError
from ..permit import Permit
from ..stores.memory import MemoryStore
from .clock import FakeClock

__all__ = ["assert_rejects", "assert_state", "half_open", "reset_breakers", "trip"]

_MAX_FAILURES = 10_000


def trip(breaker: CircuitBreaker) -> None:
    """Record real failures until the circuit is OPEN (works with any trip policy)."""
    for _ in range(_MAX_FAILURES):
        if breaker.state is State.OPEN:
            return
        try:
            breaker.acquire().failure()
        except CircuitOpenError:
            return
    raise AssertionError(f"breaker {breaker.name!r} did not open after {_MAX_FAILURES} failures")


def half_open(breaker: CircuitBreaker, clock: FakeClock) -> Permit:
    """Trip the breaker, let its wait pass on `clock`, and return the admitted probe's permit.

    The breaker must run on `clock` (`CircuitBreaker(..., clock=clock)`). While the permit is
    unsettled the state is HALF_OPEN; `permit.success()` closes it, `permit.failure()` re-opens.
    """
    trip(breaker)
    clock.advance(breaker.retry_after)
    permit = breaker.acquire()
    assert_state(breaker, State.HALF_OPEN)
    return permit


def assert_state(breaker: CircuitBreaker, expected: State | str) -> None:
    """Fail with the breaker's snapshot unless it is in `expected` (`State` or its name)."""
    want = State(expected)
    if breaker.state is not want:
        raise AssertionError(
            f"breaker {breaker.name!r} is {breaker.state.value}, expected {want.value}: "
            f"{breaker.snapshot()}"
        )


def assert_rejects(breaker: CircuitBreaker) -> CircuitOpenError:
    """Fail unless the breaker rejects a call now; returns the rejection (its retry_after...)."""
    try:
        permit = breaker.acquire()
    except CircuitOpenError as error:
        return error
    permit.ignore()
    raise AssertionError(f"breaker {breaker.name!r} admitted a call: {breaker.snapshot()}")


def reset_breakers(*, memory_only: bool = True) -> int:
    """Reset every live breaker to CLOSED; returns how many were reset.

    With `memory_only` (the default) breakers on shared stores (Redis) are left alone: their
    state belongs to a server that a fixture flushes, and a reset would cost a round trip.
    """
    count = 0
    for breaker in live_breakers():
        if memory_only and not isinstance(breaker.store, MemoryStore):
            continue
        breaker.reset()
        count += 1
    return count

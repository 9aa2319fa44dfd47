"""Retry helpers with the real tenacity and stamina: never retry into an open circuit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import stamina
from stamina.instrumentation import RetryDetails, set_on_retry_hooks
from tenacity import Retrying, stop_after_attempt, wait_fixed

from cascadebreaker import CircuitBreaker, CircuitOpenError, State
from cascadebreaker.integrations.stamina import breaker_hook
from cascadebreaker.integrations.tenacity import (
    retry_unless_open,
    retry_when_probe_due,
    wait_for_probe,
)

from .conftest import FakeClock


class Flaky:
    """Fails with ConnectionError `failures` times, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("upstream down")
        return "ok"


class WrappedRejection(Exception):
    """An application error raised `from` a CircuitOpenError (as the demo's DownstreamError)."""


def test_tenacity_waits_exactly_until_the_probe_after_the_circuit_opens(
    clock: FakeClock,
) -> None:
    breaker = CircuitBreaker("api", failure_threshold=2, recovery_timeout=5, clock=clock)
    flaky = Flaky(failures=2)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    retrying = Retrying(
        retry=retry_when_probe_due(max_wait=10),
        wait=wait_for_probe(wait_fixed(0.1), breaker=breaker),
        stop=stop_after_attempt(5),
        sleep=sleep,
        reraise=True,
    )
    assert retrying(breaker.call, flaky) == "ok"
    assert sleeps == [0.1, 5.0]  # the backoff, then exactly the breaker's wait
    assert flaky.calls == 3
    assert breaker.snapshot()["calls"]["rejected"] == 0  # no attempt hit the open circuit
    assert breaker.state is State.CLOSED


def test_tenacity_alone_retries_into_the_open_circuit(clock: FakeClock) -> None:
    # The same loop without the helpers: the third attempt is rejected, and retried again.
    breaker = CircuitBreaker("api", failure_threshold=2, recovery_timeout=5, clock=clock)
    retrying = Retrying(
        wait=wait_fixed(0.1), stop=stop_after_attempt(4), sleep=clock.advance, reraise=True
    )
    with pytest.raises(CircuitOpenError):
        retrying(breaker.call, Flaky(failures=2))
    assert breaker.snapshot()["calls"]["rejected"] == 2


def test_tenacity_never_retries_a_rejection_even_wrapped(clock: FakeClock) -> None:
    breaker = CircuitBreaker("api", clock=clock)
    breaker.force_open()
    attempts = 0

    def call() -> None:
        nonlocal attempts
        attempts += 1
        try:
            breaker.call(lambda: None)
        except CircuitOpenError as exc:
            raise WrappedRejection("refused") from exc

    retrying = Retrying(retry=retry_unless_open(), stop=stop_after_attempt(5), reraise=True)
    with pytest.raises(WrappedRejection):
        retrying(call)
    assert attempts == 1


def test_tenacity_gives_up_when_the_probe_is_too_far(clock: FakeClock) -> None:
    breaker = CircuitBreaker("api", failure_threshold=1, recovery_timeout=60, clock=clock)
    with pytest.raises(ConnectionError):
        breaker.call(Flaky(failures=1))
    retrying = Retrying(
        retry=retry_when_probe_due(max_wait=5),
        wait=wait_for_probe(breaker=breaker),
        stop=stop_after_attempt(5),
        sleep=clock.advance,
        reraise=True,
    )
    with pytest.raises(CircuitOpenError):
        retrying(breaker.call, lambda: "ok")
    assert breaker.snapshot()["calls"]["rejected"] == 1
    with pytest.raises(ValueError, match="max_wait"):
        retry_when_probe_due(max_wait=-1)


@pytest.fixture
def stamina_waits(clock: FakeClock) -> Iterator[list[float]]:
    """stamina's scheduled waits; each moves the fake clock as the real sleep goes by."""
    waits: list[float] = []

    def hook(details: RetryDetails) -> None:
        waits.append(details.wait_for)
        clock.advance(details.wait_for)

    set_on_retry_hooks([hook])
    yield waits
    set_on_retry_hooks(None)


def test_stamina_waits_exactly_until_the_probe(
    clock: FakeClock, stamina_waits: list[float]
) -> None:
    breaker = CircuitBreaker("api", failure_threshold=1, recovery_timeout=0.05, clock=clock)
    flaky = Flaky(failures=1)

    @stamina.retry(on=breaker_hook(ConnectionError, breaker=breaker), attempts=3)
    def fetch() -> str:
        return breaker.call(flaky)

    assert fetch() == "ok"
    # Not stamina's jittered backoff: exactly the breaker's wait.
    assert stamina_waits == [pytest.approx(0.05)]
    assert breaker.snapshot()["calls"]["rejected"] == 0


def test_stamina_does_not_retry_a_forced_open_circuit_or_other_errors(
    stamina_waits: list[float],
) -> None:
    breaker = CircuitBreaker("api")
    breaker.force_open()
    hook = breaker_hook(ConnectionError, breaker=breaker)
    calls = 0

    @stamina.retry(on=hook, attempts=3)
    def fetch() -> None:
        nonlocal calls
        calls += 1
        breaker.call(lambda: None)

    with pytest.raises(CircuitOpenError):
        fetch()
    assert calls == 1
    assert hook(KeyError("not an upstream error")) is False
    assert stamina_waits == []


def test_stamina_uses_its_own_backoff_while_the_circuit_is_closed() -> None:
    hook = breaker_hook(ConnectionError, breaker=CircuitBreaker("api"))
    assert hook(ConnectionError("blip")) is True
    with pytest.raises(ValueError, match="max_wait"):
        breaker_hook(max_wait=-1)

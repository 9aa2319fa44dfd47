"""tenacity strategies that respect circuit breakers (the `tenacity` extra).

    from tenacity import retry, stop_after_attempt, wait_exponential
    from cascadebreaker.integrations.tenacity import retry_unless_open, wait_for_probe

    @retry(
        retry=retry_unless_open(),                       # never retry a rejection
        wait=wait_for_probe(wait_exponential(max=5), breaker=payments),
        stop=stop_after_attempt(3),
    )
    @payments                                            # breaker inside, retry outside
    def charge(order): ...

Or, to wait for the probe when it is near: `retry=retry_when_probe_due(max_wait=2.0)`.
"""

from __future__ import annotations

import math

from tenacity import RetryCallState
from tenacity.retry import retry_base, retry_if_exception_type
from tenacity.wait import wait_base, wait_none

from ..breaker import CircuitBreaker
from .retry import open_wait, rejection_in

__all__ = ["retry_unless_open", "retry_when_probe_due", "wait_for_probe"]


def _exception(state: RetryCallState) -> BaseException | None:
    outcome = state.outcome
    if outcome is None or not outcome.failed:
        return None
    return outcome.exception()


class retry_unless_open(retry_base):
    """Retry as `inner` says, but never an attempt that a breaker rejected."""

    def __init__(self, inner: retry_base | None = None) -> None:
        self.inner = inner if inner is not None else retry_if_exception_type()

    def __call__(self, retry_state: RetryCallState) -> bool:
        """False for a rejection (even wrapped in another exception), else `inner`'s answer."""
        if rejection_in(_exception(retry_state)) is not None:
            return False
        return self.inner(retry_state)


class retry_when_probe_due(retry_base):
    """Retry a rejection only when its probe is due within `max_wait` seconds; else as `inner`."""

    def __init__(self, max_wait: float, inner: retry_base | None = None) -> None:
        if not max_wait >= 0:
            raise ValueError(f"max_wait must be a number of seconds >= 0, got {max_wait!r}")
        self.max_wait = max_wait
        self.inner = inner if inner is not None else retry_if_exception_type()

    def __call__(self, retry_state: RetryCallState) -> bool:
        """True for a rejection whose retry_after is finite and at most `max_wait`."""
        rejected = rejection_in(_exception(retry_state))
        if rejected is not None:
            return not math.isinf(rejected.retry_after) and rejected.retry_after <= self.max_wait
        return self.inner(retry_state)


class wait_for_probe(wait_base):
    """Wait as `inner` says, except when a circuit stands in the way: then exactly until its probe.

    After a rejection, that is the rejection's `retry_after`; after an upstream failure that
    left `breaker` OPEN, the breaker's. Neither earlier (the attempt would be rejected) nor later.
    """

    def __init__(self, inner: wait_base | None = None, *, breaker: CircuitBreaker | None = None):
        self.inner = inner if inner is not None else wait_none()
        self.breaker = breaker

    def __call__(self, retry_state: RetryCallState) -> float:
        """Seconds to sleep before the next attempt."""
        wait = open_wait(_exception(retry_state), self.breaker)
        if wait is None or math.isinf(wait):
            return float(self.inner(retry_state))
        return wait

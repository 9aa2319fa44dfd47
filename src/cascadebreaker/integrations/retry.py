"""What the retry helpers agree on: find a breaker's rejection, and how long until the probe.

The order they document: **retry outside, breaker inside** (`@retry` above `@breaker`). Each
attempt then asks the breaker: failures count one by one, a circuit that opens mid-loop stops
the next attempt at once (no socket), and the wait before it is the breaker's own `retry_after`
instead of a guess. A breaker outside the retry would hold one permit (or a half-open probe
slot) across every attempt and count a whole retry storm as one call.
"""

from __future__ import annotations

import math

from ..breaker import CircuitBreaker
from ..core.state import State
from ..errors import CircuitOpenError

__all__ = ["open_wait", "rejection_in"]


def rejection_in(exc: BaseException | None) -> CircuitOpenError | None:
    """The CircuitOpenError behind `exc`: itself, or one in its cause/context chain."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, CircuitOpenError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def open_wait(exc: BaseException | None, breaker: CircuitBreaker | None = None) -> float | None:
    """Seconds until the next attempt may be admitted, or None when no circuit stands in the way.

    A rejection answers with its own `retry_after`; an upstream failure that left `breaker`
    OPEN answers with the breaker's. `math.inf` means forced open: never worth waiting for.
    A rejection with nothing to wait for (the half-open probes are busy) answers None, so the
    caller's own backoff applies rather than a busy loop.
    """
    rejected = rejection_in(exc)
    if rejected is not None:
        wait = rejected.retry_after
    elif breaker is not None and breaker.state is State.OPEN:
        wait = breaker.retry_after
    else:
        return None
    if math.isinf(wait):
        return math.inf
    return wait if wait > 0 else None

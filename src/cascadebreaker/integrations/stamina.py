"""A stamina backoff hook that respects circuit breakers (the `stamina` extra, stamina >= 25.2).

    import stamina
    from cascadebreaker.integrations.stamina import breaker_hook

    @stamina.retry(on=breaker_hook(httpx.HTTPError, breaker=payments), attempts=3)
    @payments                                            # breaker inside, retry outside
    def charge(order): ...

The hook retries the exceptions you name with stamina's own backoff; when a circuit stands in
the way it returns the exact wait until the probe (stamina does not clamp a hook's wait).
A rejection is retried only when its probe is due within `max_wait` seconds, never when the
circuit was forced open.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..breaker import CircuitBreaker
from .retry import open_wait, rejection_in

__all__ = ["breaker_hook"]


def breaker_hook(
    on: type[Exception] | tuple[type[Exception], ...] = Exception,
    *,
    breaker: CircuitBreaker | None = None,
    max_wait: float = 30.0,
) -> Callable[[Exception], bool | float]:
    """A stamina `on=` hook: False, True (stamina's backoff) or the seconds until the probe."""
    if not max_wait >= 0:
        raise ValueError(f"max_wait must be a number of seconds >= 0, got {max_wait!r}")

    def hook(exc: Exception) -> bool | float:
        rejected = rejection_in(exc) is not None
        if not rejected and not isinstance(exc, on):
            return False
        wait = open_wait(exc, breaker)
        if wait is None:
            return True  # nothing to wait for: stamina's backoff (busy probes, closed circuit)
        if math.isinf(wait) or wait > max_wait:
            return False  # forced open, or the probe is too far away: give up now
        return wait

    return hook

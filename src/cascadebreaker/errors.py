"""Exceptions raised by cascadebreaker.

    CascadeBreakerError          base of everything this package raises on its own
    └── CircuitOpenError         a call was rejected without running (circuit OPEN / probes busy)

Upstream exceptions are never wrapped: a failing call re-raises the caller's own exception.
Store errors (Redis down) are never raised to callers; the breaker falls back to local state.
"""

from __future__ import annotations

import math

from .core.state import State


class CascadeBreakerError(Exception):
    """Base class of the errors cascadebreaker raises itself."""


class CircuitOpenError(CascadeBreakerError):
    """The breaker rejected the call without running it."""

    def __init__(self, name: str, state: State, retry_after: float) -> None:
        self.name = name
        self.state = state
        self.retry_after = retry_after
        wait = "until reset" if math.isinf(retry_after) else f"retry in {retry_after:.3f}s"
        super().__init__(f"circuit '{name}' is {state.value}: call rejected, {wait}")

    def __reduce__(self) -> tuple[type[CircuitOpenError], tuple[str, State, float]]:
        return (CircuitOpenError, (self.name, self.state, self.retry_after))

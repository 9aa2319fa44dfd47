"""The degraded-result contract: what a front end receives instead of an exception."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .core.state import State

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FallbackReason:
    """Why a fallback runs: the circuit state, and the exception (None when rejected unrun)."""

    breaker: str
    state: State
    exception: BaseException | None
    retry_after: float = 0.0

    @property
    def rejected(self) -> bool:
        """True when the call never ran (circuit open or probes busy)."""
        return self.exception is None

    def describe(self) -> str:
        """A short human-readable reason, safe to show to a front end."""
        if self.exception is None:
            return f"circuit {self.state.value}: upstream '{self.breaker}' not called"
        return f"upstream '{self.breaker}' failed: {type(self.exception).__name__}"


@dataclass(frozen=True, slots=True)
class GuardedResult(Generic[T]):
    """The outcome of `guard`: data plus whether it is degraded (fallback or nothing).

    A call that succeeds and returns None is *not* degraded: None can be a legitimate answer.
    """

    data: T | None
    is_degraded: bool
    circuit_state: State
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape front ends consume: data, isDegraded, circuitState, reason."""
        return {
            "data": self.data,
            "isDegraded": self.is_degraded,
            "circuitState": self.circuit_state.value,
            "reason": self.reason,
        }

"""Events a breaker emits to its listeners: transitions and call outcomes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .core.state import Outcome, State


@dataclass(frozen=True, slots=True)
class TransitionEvent:
    """Breaker `name` moved from one state to another."""

    name: str
    from_state: State
    to_state: State
    reason: str
    at: float  # the breaker's clock
    version: int


@dataclass(frozen=True, slots=True)
class OutcomeEvent:
    """One call through breaker `name` finished (or was rejected: outcome None)."""

    name: str
    outcome: Outcome | None  # None: rejected without running
    probe: bool
    duration: float
    state: State


TransitionListener = Callable[[TransitionEvent], None]
OutcomeListener = Callable[[OutcomeEvent], None]

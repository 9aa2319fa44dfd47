"""Events a breaker emits to its listeners: transitions and call outcomes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .core.state import Outcome, Scope, State


@dataclass(frozen=True, slots=True)
class TransitionEvent:
    """Breaker `name` moved from one state to another."""

    name: str
    from_state: State
    to_state: State
    reason: str  # a Reason code: consecutive_failures, probe_failed, open_wait_over, reset, ...
    at: float  # the breaker's clock
    version: int
    detail: str = ""  # for people: "5 consecutive failures"
    scope: Scope = Scope.LOCAL  # SHARED: the fleet's state (a shared store), LOCAL: ours alone


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

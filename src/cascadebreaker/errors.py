"""Exceptions raised by cascadebreaker.

    CascadeBreakerError          base of everything this package raises on its own
    └── CircuitOpenError         a call was rejected without running (circuit OPEN / probes busy)

Upstream exceptions are never wrapped: a failing call re-raises the caller's own exception.
Store errors (Redis down) are never raised to callers; the breaker falls back to local state.
"""

from __future__ import annotations

import math
from typing import Any

from .core.classify import FailureInfo
from .core.state import Scope, State


class CascadeBreakerError(Exception):
    """Base class of the errors cascadebreaker raises itself."""


class CircuitOpenError(CascadeBreakerError):
    """The breaker rejected the call without running it.

    `reason` is a Reason code (why it is open: `consecutive_failures`, `failure_rate`,
    `probe_failed`, `forced_open`, or `probe_budget` while half-open probes are all out),
    `last_failure` the failure that counted last, `scope` whether the state is this process's
    own (`local`) or the fleet's (`shared`).
    """

    def __init__(
        self,
        name: str,
        state: State,
        retry_after: float,
        reason: str = "",
        last_failure: FailureInfo | None = None,
        scope: Scope = Scope.LOCAL,
        detail: str = "",
    ) -> None:
        self.name = name
        self.state = state
        self.retry_after = retry_after
        self.reason = reason
        self.last_failure = last_failure
        self.scope = scope
        self.detail = detail
        wait = "until reset" if math.isinf(retry_after) else f"retry in {retry_after:.3f}s"
        why = f" ({reason}{', ' + scope.value if scope is Scope.LOCAL else ''})" if reason else ""
        super().__init__(f"circuit '{name}' is {state.value}{why}: call rejected, {wait}")

    def __reduce__(self) -> tuple[type[CircuitOpenError], tuple[Any, ...]]:
        return (
            CircuitOpenError,
            (
                self.name,
                self.state,
                self.retry_after,
                self.reason,
                self.last_failure,
                self.scope,
                self.detail,
            ),
        )

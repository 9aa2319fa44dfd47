"""The degraded-result contract: what a front end receives instead of an exception."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .contract import (
    CIRCUIT_STATE,
    REASON_CODE,
    RETRY_AFTER,
    TRIPPED_BY,
    Reason,
    Scope,
    State,
    degraded_reason,
)
from .core.classify import FailureInfo

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FallbackReason:
    """Why a fallback runs: the circuit state, the exception (None when rejected unrun or when a
    returned value was classified as a failure), and the breaker's reason.

    `reason` is a Reason code: `call_failed` when the call ran and failed, else why the circuit
    refused it (`consecutive_failures`, `failure_rate`, `probe_budget`, `forced_open`, ...).
    `last_failure` is the failure that counted last (for a rejection: what opened the circuit).
    """

    breaker: str
    state: State
    exception: BaseException | None
    retry_after: float = 0.0
    reason: str = ""
    last_failure: FailureInfo | None = None
    scope: Scope = Scope.LOCAL

    @property
    def rejected(self) -> bool:
        """True when the call never ran (circuit open or probes busy)."""
        return self.exception is None and self.reason != Reason.CALL_FAILED

    def describe(self) -> str:
        """A short human-readable reason, safe to show to a front end."""
        if self.exception is None:
            if self.reason == Reason.CALL_FAILED:
                return f"upstream '{self.breaker}' returned a failed result"
            return f"circuit {self.state.value}: upstream '{self.breaker}' not called"
        return f"upstream '{self.breaker}' failed: {type(self.exception).__name__}"


@dataclass(frozen=True, slots=True)
class GuardedResult(Generic[T]):
    """The outcome of `guard`: data plus whether it is degraded (fallback or nothing).

    A call that succeeds and returns None is *not* degraded: None can be a legitimate answer.
    `retry_after` is how many seconds until the breaker admits calls again (0.0: now; None: only
    an operator can close it), so a front end can schedule its retry instead of polling;
    `reason_code` is the FallbackReason's code (None when not degraded); `code` the contract's
    word for the front end (docs/contract.md): `circuit_open`, `forced_open`, `probe_budget`,
    `upstream_error` or `failed_result`.
    """

    data: T | None
    is_degraded: bool
    circuit_state: State
    reason: str | None = None
    retry_after: float | None = 0.0
    reason_code: str | None = None
    code: str | None = None

    @classmethod
    def degraded(
        cls, data: T | None, state: State, why: FallbackReason, retry_after: float | None
    ) -> GuardedResult[T]:
        """A degraded result for a fallback reason, with the contract's code."""
        raised = why.exception is not None
        code = degraded_reason(why.reason, ran=not why.rejected, raised=raised)
        return cls(data, True, state, why.describe(), retry_after, why.reason, code.value)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape front ends consume: data, isDegraded, circuitState, reason (text),
        reasonCode (the contract's), trippedBy (why the breaker is open, for a refusal),
        retryAfter (seconds, null when only an operator can close the circuit)."""
        retry = self.retry_after
        refused = self.code is not None and self.code not in _RAN
        return {
            "data": self.data,
            "isDegraded": self.is_degraded,
            CIRCUIT_STATE: self.circuit_state.value,
            "reason": self.reason,
            REASON_CODE: self.code or self.reason_code,
            TRIPPED_BY: self.reason_code if refused else None,
            RETRY_AFTER: None if retry is None or math.isinf(retry) else round(retry, 3),
        }


_RAN = frozenset({Reason.UPSTREAM_ERROR.value, Reason.FAILED_RESULT.value})

"""BreakerSnapshot: a documented, read-only view of one breaker for tests and dashboards."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .contract import RETRY_AFTER, Mode, Scope, State
from .core.classify import FailureInfo


@dataclass(frozen=True, slots=True)
class PolicyWindow:
    """What one trip policy holds now: `hits` are failures (consecutive_failures, failure_rate)
    or slow calls (slow_call_rate) among `calls` (for consecutive_failures: the current run)."""

    policy: str
    calls: int
    hits: int


@dataclass(frozen=True, slots=True)
class CallCounts:
    """Calls through the breaker in this process since it was created."""

    success: int
    failure: int
    ignored: int
    rejected: int


@dataclass(frozen=True, slots=True)
class BreakerSnapshot(Mapping[str, Any]):
    """One breaker at one moment. Attributes are typed; as a Mapping it reads like `to_dict()`
    (so `snapshot()["calls"]["failure"]` keeps working)."""

    name: str
    state: State  # what callers see (forced open reads OPEN, disabled reads CLOSED)
    mode: Mode
    scope: Scope  # LOCAL: this process's own state; SHARED: the fleet's
    reason: str  # Reason code of the last transition ('' for a fresh breaker)
    detail: str  # the same for people ("5 consecutive failures")
    retry_after: float | None  # seconds until calls are admitted; None: until an operator resets
    opened_at: float | None  # breaker clock time of the last opening, while not CLOSED
    probes_out: int  # half-open probes admitted and not yet reported (as far as this process knows)
    round: int  # this process's round (epoch) of the circuit
    version: int  # the shared state's version (shared stores), else the count of transitions
    windows: tuple[PolicyWindow, ...]  # per trip policy, in this process
    calls: CallCounts
    last_failure: FailureInfo | None  # the last failure that counted, shared stores: fleet-wide

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (camelCase keys; retryAfter in seconds, null when forced open)."""
        return {
            "name": self.name,
            "state": self.state.value,
            "mode": self.mode.value,
            "scope": self.scope.value,
            "reason": str(self.reason),
            "detail": self.detail,
            RETRY_AFTER: self.retry_after,
            "openedAt": self.opened_at,
            "probesOut": self.probes_out,
            "round": self.round,
            "version": self.version,
            "windows": [
                {"policy": str(w.policy), "calls": w.calls, "hits": w.hits} for w in self.windows
            ],
            "calls": {
                "success": self.calls.success,
                "failure": self.calls.failure,
                "ignored": self.calls.ignored,
                "rejected": self.calls.rejected,
            },
            "lastFailure": None
            if self.last_failure is None
            else {"type": self.last_failure.type, "message": self.last_failure.message},
        }

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

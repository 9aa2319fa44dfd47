"""The vocabulary every part and every client shares: state names, reason codes, JSON keys.

Pure: this module imports nothing of the package, so the pure core may use it too. Names here
are a contract with dashboards, front ends and other languages: add, never rename.

    states     CLOSED, OPEN, HALF_OPEN                       (State)
    modes      NORMAL, FORCED_OPEN, DISABLED                 (Mode)
    scopes     local, shared                                 (Scope)
    reasons    consecutive_failures, failure_rate, ...       (Reason)
    JSON       camelCase keys; durations in seconds as floats (retryAfter)
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "CIRCUIT_STATE",
    "REASON_CODE",
    "RETRY_AFTER",
    "Mode",
    "Reason",
    "Scope",
    "State",
]


class State(StrEnum):
    """Where a circuit is: CLOSED lets calls through, OPEN rejects them, HALF_OPEN probes."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class Mode(StrEnum):
    """Manual control of a breaker, overriding the policy."""

    NORMAL = "NORMAL"
    FORCED_OPEN = "FORCED_OPEN"  # reject everything until reset
    DISABLED = "DISABLED"  # always closed, nothing recorded


class Scope(StrEnum):
    """Whose state a breaker shows: its own process's, or the fleet's (a shared store)."""

    LOCAL = "local"  # this process alone (memory store, a replica that tripped alone, offline)
    SHARED = "shared"  # the state every process sharing the breaker sees


class Reason(StrEnum):
    """Stable codes for why a circuit moved, or why a call was refused or fell back."""

    CONSECUTIVE_FAILURES = "consecutive_failures"  # the consecutive-failures policy tripped
    FAILURE_RATE = "failure_rate"  # the failure-rate policy tripped
    SLOW_CALL_RATE = "slow_call_rate"  # the slow-call-rate policy tripped
    OPEN_WAIT_OVER = "open_wait_over"  # OPEN -> HALF_OPEN
    PROBE_FAILED = "probe_failed"  # half-open probes failed: back to OPEN
    PROBE_SLOW = "probe_slow"  # half-open probes were too slow: back to OPEN
    PROBES_SUCCEEDED = "probes_succeeded"  # half-open probes succeeded: CLOSED
    HALF_OPEN_TIMEOUT = "half_open_timeout"  # half-open outlived max_half_open_time
    PROBE_BUDGET = "probe_budget"  # refused: half-open, every probe slot is taken
    FORCED_OPEN = "forced_open"
    DISABLED = "disabled"
    RESET = "reset"
    CALL_FAILED = "call_failed"  # a fallback ran because the call itself failed


# JSON keys shared by several shapes (GuardedResult.to_dict, BreakerSnapshot.to_dict).
CIRCUIT_STATE = "circuitState"  # a State name
RETRY_AFTER = "retryAfter"  # seconds (float) until calls are admitted; null: until reset
REASON_CODE = "reasonCode"  # a Reason code

"""Circuit states, call outcomes and transitions: the vocabulary of the state machine."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum


class State(StrEnum):
    """Where a circuit is: CLOSED lets calls through, OPEN rejects them, HALF_OPEN probes."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class Outcome(IntEnum):
    """How one admitted call ended, as the classifier sees it."""

    SUCCESS = 0
    FAILURE = 1
    IGNORED = 2  # neither success nor failure (ignored exception, cancellation)


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
    """Stable codes for why a circuit moved or a call was refused (see contract.py)."""

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


class Admission(IntEnum):
    """The machine's answer to "may this call run?"."""

    ADMIT = 0
    PROBE = 1  # admitted as one of the half-open probes
    REJECT = 2


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of state, as decided by the machine at clock time `at`."""

    from_state: State
    to_state: State
    at: float
    reason: str  # a Reason code (a shared store may carry codes this version does not know)
    version: int
    detail: str = ""  # for people: "5 consecutive failures", "failures 6/10 >= 50%"

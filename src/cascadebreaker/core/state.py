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
    reason: str
    version: int

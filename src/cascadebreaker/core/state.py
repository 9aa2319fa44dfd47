"""Circuit states, call outcomes and transitions: the vocabulary of the state machine.

The names people and clients read (State, Mode, Scope, Reason) live in `cascadebreaker.contract`
and are re-exported here; Outcome, Admission and Transition are the machine's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from ..contract import Mode, Reason, Scope, State

__all__ = ["Admission", "Mode", "Outcome", "Reason", "Scope", "State", "Transition"]


class Outcome(IntEnum):
    """How one admitted call ended, as the classifier sees it."""

    SUCCESS = 0
    FAILURE = 1
    IGNORED = 2  # neither success nor failure (ignored exception, cancellation)


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

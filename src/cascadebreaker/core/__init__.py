"""Pure core: state machine, policies, windows, classification. No I/O; the clock is injected."""

from .classify import Classifier, FailureInfo
from .config import BreakerConfig, build_policies
from .machine import BreakerMachine
from .policies import (
    Backoff,
    ConsecutiveFailures,
    ExponentialBackoff,
    FailureRate,
    FixedBackoff,
    SlowCallRate,
    TripPolicy,
)
from .state import Admission, Mode, Outcome, Reason, Scope, State, Transition
from .windows import CountWindow, TimeWindow

__all__ = [
    "Admission",
    "Backoff",
    "BreakerConfig",
    "BreakerMachine",
    "Classifier",
    "ConsecutiveFailures",
    "CountWindow",
    "ExponentialBackoff",
    "FailureInfo",
    "FailureRate",
    "FixedBackoff",
    "Mode",
    "Outcome",
    "Reason",
    "Scope",
    "SlowCallRate",
    "State",
    "TimeWindow",
    "Transition",
    "TripPolicy",
    "build_policies",
]

"""cascadebreaker: circuit breakers that share state across processes and cascade unavailability.

from cascadebreaker import CircuitBreaker, State, CircuitOpenError, MemoryStore, RedisStore
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .breaker import CircuitBreaker
from .core import (
    Backoff,
    ConsecutiveFailures,
    CountWindow,
    ExponentialBackoff,
    FailureInfo,
    FailureRate,
    FixedBackoff,
    Outcome,
    Reason,
    Scope,
    SlowCallRate,
    State,
    TimeWindow,
    TripPolicy,
)
from .degraded import FallbackReason, GuardedResult
from .errors import CascadeBreakerError, CircuitOpenError
from .events import OutcomeEvent, TransitionEvent
from .permit import Permit
from .snapshot import BreakerSnapshot, CallCounts, PolicyWindow
from .stores.base import BreakerSlot, Store
from .stores.memory import MemoryStore
from .stores.quorum import FleetQuorum

if _TYPE_CHECKING:  # loaded on first use at run time (see __getattr__); typed for checkers
    from .stores.redis import RedisStore

__version__ = "0.1.0"

__all__ = [
    "Backoff",
    "BreakerSlot",
    "BreakerSnapshot",
    "CallCounts",
    "CascadeBreakerError",
    "CircuitBreaker",
    "CircuitOpenError",
    "ConsecutiveFailures",
    "CountWindow",
    "ExponentialBackoff",
    "FailureInfo",
    "FailureRate",
    "FallbackReason",
    "FixedBackoff",
    "FleetQuorum",
    "GuardedResult",
    "MemoryStore",
    "Outcome",
    "OutcomeEvent",
    "Permit",
    "PolicyWindow",
    "Reason",
    "RedisStore",
    "Scope",
    "SlowCallRate",
    "State",
    "Store",
    "TimeWindow",
    "TransitionEvent",
    "TripPolicy",
    "__version__",
]


def __getattr__(name: str) -> object:
    # RedisStore needs the `redis` extra; import it only when asked for.
    if name == "RedisStore":
        from .stores.redis import RedisStore

        return RedisStore
    raise AttributeError(f"module 'cascadebreaker' has no attribute {name!r}")

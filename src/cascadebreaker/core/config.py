"""BreakerConfig: every setting of one breaker, validated when the breaker is built."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .classify import Classifier
from .policies import Backoff, ConsecutiveFailures, FixedBackoff, TripPolicy


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """Settings of one breaker. Invalid values raise ValueError naming the setting."""

    policies: tuple[TripPolicy, ...] = (ConsecutiveFailures(5),)
    backoff: Backoff = FixedBackoff(30.0)
    half_open_max_calls: int = 1
    success_threshold: int = 1  # probe successes needed to close; <= half_open_max_calls
    max_half_open_time: float | None = None  # reopen if half-open lasts longer (lost probes)
    metrics_only: bool = False  # observe and transition, never reject
    classifier: Classifier = field(default_factory=Classifier)

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("policy must name at least one trip policy")
        for p in self.policies:
            if not isinstance(p, TripPolicy):
                raise ValueError(f"policy entries must be TripPolicy instances, got {p!r}")
        if not isinstance(self.backoff, Backoff):
            raise ValueError(f"backoff must be a Backoff, got {self.backoff!r}")
        _int_at_least("half_open_max_calls", self.half_open_max_calls, 1)
        _int_at_least("success_threshold", self.success_threshold, 1)
        if self.success_threshold > self.half_open_max_calls:
            raise ValueError(
                f"success_threshold must be <= half_open_max_calls "
                f"({self.half_open_max_calls}), got {self.success_threshold!r}"
            )
        if self.max_half_open_time is not None and not self.max_half_open_time > 0:
            raise ValueError(f"max_half_open_time must be > 0, got {self.max_half_open_time!r}")

    @property
    def needs_duration(self) -> bool:
        """True when some policy judges call durations."""
        return any(p.needs_duration for p in self.policies)

    @property
    def consecutive_only(self) -> bool:
        """True when successes matter only to reset a failure run (the lock-free closed path)."""
        return all(not p.counts_successes for p in self.policies)


def build_policies(
    failure_threshold: int, policy: TripPolicy | Sequence[TripPolicy] | None
) -> tuple[TripPolicy, ...]:
    """Turn the facade's `failure_threshold` / `policy` arguments into policy specs."""
    if policy is None:
        _int_at_least("failure_threshold", failure_threshold, 1)
        return (ConsecutiveFailures(failure_threshold),)
    if isinstance(policy, TripPolicy):
        return (policy,)
    return tuple(policy)


def _int_at_least(setting: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{setting} must be an integer >= {low}, got {value!r}")

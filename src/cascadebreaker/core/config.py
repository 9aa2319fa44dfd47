"""BreakerConfig: every setting of one breaker, validated when the breaker is built."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, TypeGuard

from .classify import Classifier
from .policies import Backoff, ConsecutiveFailures, FixedBackoff, SlowCallRate, TripPolicy

# A probe that has not reported after this long (or after the first open wait, if longer) is
# presumed lost and its slot is given to a new probe: a half-open circuit can never wedge.
MIN_PROBE_TIMEOUT: Final = 10.0


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """Settings of one breaker. Invalid values raise ValueError naming the setting."""

    policies: tuple[TripPolicy, ...] = (ConsecutiveFailures(5),)
    backoff: Backoff = FixedBackoff(30.0)
    half_open_max_calls: int = 1
    success_threshold: int = 1  # probe successes needed to close; <= half_open_max_calls
    max_half_open_time: float | None = None  # reopen if half-open lasts longer
    metrics_only: bool = False  # observe and transition, never reject
    classifier: Classifier = field(default_factory=Classifier)
    probe_timeout: float | None = None  # None: max(MIN_PROBE_TIMEOUT, the first open wait)
    half_open_failure_rate: float | None = None  # judge a round of probes by their failure rate

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("policy must name at least one trip policy")
        for p in self.policies:
            if not isinstance(p, TripPolicy):
                raise ValueError(f"policy entries must be TripPolicy instances, got {p!r}")
        if not isinstance(self.backoff, Backoff):
            raise ValueError(f"backoff must be a Backoff, got {self.backoff!r}")
        check_settings(
            self.half_open_max_calls,
            self.success_threshold,
            self.max_half_open_time,
            self.probe_timeout,
            self.half_open_failure_rate,
        )

    @property
    def needs_duration(self) -> bool:
        """True when some policy judges call durations."""
        return any(p.needs_duration for p in self.policies)

    @property
    def probe_lease(self) -> float:
        """Seconds after which an unreported probe's slot is given to a new probe."""
        if self.probe_timeout is not None:
            return self.probe_timeout
        return max(MIN_PROBE_TIMEOUT, self.backoff.delay(1, 0.5))

    @property
    def probe_slow_after(self) -> float | None:
        """A probe at least this slow counts as slow (the shortest slow-call duration)."""
        slow = [p.duration for p in self.policies if isinstance(p, SlowCallRate)]
        return min(slow) if slow else None

    @property
    def probe_slow_rate(self) -> float:
        """Share of slow probes in a round that reopens the circuit (window mode)."""
        return min((p.rate for p in self.policies if isinstance(p, SlowCallRate)), default=1.0)

    @property
    def consecutive_only(self) -> bool:
        """True when successes matter only to reset a failure run (the lock-free closed path)."""
        return all(not p.counts_successes for p in self.policies)


def check_settings(
    half_open_max_calls: object,
    success_threshold: object,
    max_half_open_time: object,
    probe_timeout: object,
    half_open_failure_rate: object,
) -> None:
    """Raise ValueError naming the first bad one of these settings.

    Typed `object`: when this module is compiled (mypyc), BreakerConfig's constructor refuses a
    wrong-typed value with a TypeError that names no setting, so the facade checks first.
    """
    half_open = _int_at_least("half_open_max_calls", half_open_max_calls, 1)
    successes = _int_at_least("success_threshold", success_threshold, 1)
    if successes > half_open:
        raise ValueError(
            f"success_threshold must be <= half_open_max_calls ({half_open}), got {successes!r}"
        )
    for setting, value in (
        ("max_half_open_time", max_half_open_time),
        ("probe_timeout", probe_timeout),
    ):
        if value is not None and not (_is_number(value) and value > 0):
            raise ValueError(f"{setting} must be a number > 0, got {value!r}")
    rate = half_open_failure_rate
    if rate is not None and not (_is_number(rate) and 0.0 < rate <= 1.0):
        raise ValueError(f"half_open_failure_rate must be in (0, 1], got {rate!r}")


def build_policies(
    failure_threshold: object, policy: TripPolicy | Sequence[TripPolicy] | None
) -> tuple[TripPolicy, ...]:
    """Turn the facade's `failure_threshold` / `policy` arguments into policy specs."""
    if policy is None:
        threshold = _int_at_least("failure_threshold", failure_threshold, 1)
        return (ConsecutiveFailures(threshold),)
    if isinstance(policy, TripPolicy):
        return (policy,)
    return tuple(policy)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int_at_least(setting: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{setting} must be an integer >= {low}, got {value!r}")
    return value

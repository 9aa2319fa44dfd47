"""Trip policies (when to open) and open-wait backoffs (how long to stay open).

Policies are immutable specs; each breaker asks a spec for a fresh `tracker()` holding the
counters, so one spec can serve many breakers.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

from .state import Reason
from .windows import CountWindow, OutcomeWindow, TimeWindow


class TripTracker(ABC):
    """Counts outcomes for one policy and says when the circuit should open."""

    __slots__ = ()
    reason: str = "policy"  # the Reason code of a trip by this tracker

    @abstractmethod
    def record(self, now: float, failed: bool, duration: float) -> str | None:
        """Record one outcome (duration in seconds, 0.0 when untimed); when the circuit should
        open, return the detail for people ("5 consecutive failures"), else None."""

    @abstractmethod
    def reset(self) -> None:
        """Forget everything (on close or manual reset)."""

    def counts(self, now: float) -> tuple[int, int]:
        """(calls, hits) the policy holds now: hits are what it counts against the upstream."""
        return 0, 0


class TripPolicy(ABC):
    """A spec for when a closed circuit opens."""

    needs_duration: bool = False  # the breaker must time calls for this policy
    counts_successes: bool = True  # every success must be recorded (windows do; consecutive not)

    @abstractmethod
    def tracker(self) -> TripTracker:
        """Return fresh counters for one breaker."""


@dataclass(frozen=True, slots=True)
class ConsecutiveFailures(TripPolicy):
    """Open after `threshold` failures in a row; any success resets the count."""

    threshold: int = 5
    counts_successes = False

    def __post_init__(self) -> None:
        _require(self.threshold >= 1, "failure_threshold", "must be >= 1", self.threshold)

    def tracker(self) -> TripTracker:
        return _ConsecutiveTracker(self.threshold)


class _ConsecutiveTracker(TripTracker):
    __slots__ = ("count", "threshold")
    reason = Reason.CONSECUTIVE_FAILURES

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.count = 0

    def record(self, now: float, failed: bool, duration: float) -> str | None:
        if not failed:
            self.count = 0
            return None
        self.count += 1
        if self.count >= self.threshold:
            return f"{self.count} consecutive failures"
        return None

    def reset(self) -> None:
        self.count = 0

    def counts(self, now: float) -> tuple[int, int]:
        return self.count, self.count  # the run: every call in it failed


WindowSpec = CountWindow | TimeWindow


@dataclass(frozen=True, slots=True)
class FailureRate(TripPolicy):
    """Open when failures are at least `rate` of the calls in the window (after `minimum_calls`)."""

    window: WindowSpec = CountWindow(100)
    rate: float = 0.5
    minimum_calls: int = 10

    def __post_init__(self) -> None:
        _require(0.0 < self.rate <= 1.0, "failure_rate", "must be in (0, 1]", self.rate)
        _require(self.minimum_calls >= 1, "minimum_calls", "must be >= 1", self.minimum_calls)

    def tracker(self) -> TripTracker:
        return _RateTracker(self.window.new(), self.rate, self.minimum_calls, slow_after=None)


@dataclass(frozen=True, slots=True)
class SlowCallRate(TripPolicy):
    """Open when calls slower than `duration` seconds are at least `rate` of the window."""

    duration: float = 5.0
    window: WindowSpec = CountWindow(100)
    rate: float = 0.5
    minimum_calls: int = 10
    needs_duration = True

    def __post_init__(self) -> None:
        _require(self.duration > 0, "slow_call_duration", "must be > 0", self.duration)
        _require(0.0 < self.rate <= 1.0, "slow_call_rate", "must be in (0, 1]", self.rate)
        _require(self.minimum_calls >= 1, "minimum_calls", "must be >= 1", self.minimum_calls)

    def tracker(self) -> TripTracker:
        return _RateTracker(self.window.new(), self.rate, self.minimum_calls, self.duration)


class _RateTracker(TripTracker):
    __slots__ = ("minimum", "rate", "reason", "slow_after", "window")

    def __init__(
        self, window: OutcomeWindow, rate: float, minimum: int, slow_after: float | None
    ) -> None:
        self.window = window
        self.rate = rate
        self.minimum = minimum
        self.slow_after = slow_after  # None: count failures; else count calls at least this slow
        self.reason = Reason.FAILURE_RATE if slow_after is None else Reason.SLOW_CALL_RATE

    def record(self, now: float, failed: bool, duration: float) -> str | None:
        hit = failed if self.slow_after is None else duration >= self.slow_after
        self.window.add(now, hit)
        total, hits = self.window.totals(now)
        if total >= self.minimum and hits >= self.rate * total:
            what = "failures" if self.slow_after is None else "slow calls"
            return f"{what} {hits}/{total} >= {self.rate:.0%}"
        return None

    def reset(self) -> None:
        self.window.clear()

    def counts(self, now: float) -> tuple[int, int]:
        return self.window.totals(now)


class Backoff(ABC):
    """How long a circuit stays open before it admits probes."""

    @abstractmethod
    def delay(self, opens: int, jitter_draw: float) -> float:
        """Seconds to stay open for the `opens`-th consecutive opening (1-based)."""


@dataclass(frozen=True, slots=True)
class FixedBackoff(Backoff):
    """Always wait `seconds`."""

    seconds: float = 30.0

    def __post_init__(self) -> None:
        _require(self.seconds > 0, "recovery_timeout", "must be > 0", self.seconds)

    def delay(self, opens: int, jitter_draw: float) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class ExponentialBackoff(Backoff):
    """Wait `initial * multiplier**(opens-1)`, capped at `maximum`, spread by ±`jitter`."""

    initial: float = 1.0
    maximum: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        _require(self.initial > 0, "backoff.initial", "must be > 0", self.initial)
        _require(
            self.maximum >= self.initial, "backoff.maximum", "must be >= initial", self.maximum
        )
        _require(self.multiplier >= 1.0, "backoff.multiplier", "must be >= 1", self.multiplier)
        _require(0.0 <= self.jitter < 1.0, "backoff.jitter", "must be in [0, 1)", self.jitter)

    def delay(self, opens: int, jitter_draw: float) -> float:
        exponent = min(max(opens - 1, 0), 64)  # beyond 2**64 the cap has long applied
        base = min(self.maximum, self.initial * math.pow(self.multiplier, exponent))
        return base * (1.0 + self.jitter * (2.0 * jitter_draw - 1.0))


def _require(ok: bool, setting: str, rule: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{setting} {rule}, got {value!r}")

"""The pure breaker state machine: decisions from (state, clock time, outcomes), no I/O.

Drivers (the CircuitBreaker facade, the stores) hold the lock, read the clock, call `admit` and
`record`, and act on the Admission and Transitions returned (tenacity's `iter()` habit).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from .config import BreakerConfig
from .policies import TripTracker
from .state import Admission, Mode, Outcome, State, Transition

NO_TRANSITIONS: tuple[Transition, ...] = ()


class BreakerMachine:
    """State, counters and rules of one circuit."""

    __slots__ = (
        "config",
        "half_open_since",
        "jitter",
        "mode",
        "open_until",
        "opened_at",
        "opens",
        "probe_successes",
        "probes_admitted",
        "reason",
        "state",
        "trackers",
        "version",
    )

    def __init__(self, config: BreakerConfig, jitter: Callable[[], float] = random.random) -> None:
        self.config = config
        self.jitter = jitter
        self.state = State.CLOSED
        self.mode = Mode.NORMAL
        self.version = 0
        self.reason = ""
        self.opened_at = 0.0
        self.open_until = 0.0
        self.opens = 0  # consecutive openings without a close, for the backoff
        self.half_open_since = 0.0
        self.probes_admitted = 0
        self.probe_successes = 0
        self.trackers: list[TripTracker] = [p.tracker() for p in config.policies]

    # -- decisions -------------------------------------------------------------------------

    def admit(self, now: float) -> tuple[Admission, tuple[Transition, ...]]:
        """May a call start now? Moves OPEN → HALF_OPEN when the wait is over."""
        if self.mode is Mode.DISABLED:
            return Admission.ADMIT, NO_TRANSITIONS
        if self.mode is Mode.FORCED_OPEN:
            return Admission.REJECT, NO_TRANSITIONS
        state = self.state
        if state is State.CLOSED:
            return Admission.ADMIT, NO_TRANSITIONS
        transitions: tuple[Transition, ...] = NO_TRANSITIONS
        if state is State.OPEN:
            if now < self.open_until:
                return self._rejected(), NO_TRANSITIONS
            transitions = (self._to_half_open(now),)
        elif self._half_open_expired(now):
            return self._rejected(), (self._to_open(now, "half-open for too long"),)
        if self.probes_admitted < self.config.half_open_max_calls:
            self.probes_admitted += 1
            return Admission.PROBE, transitions
        return self._rejected(), transitions

    def record(
        self, now: float, outcome: Outcome, probe: bool, duration: float = 0.0
    ) -> tuple[Transition, ...]:
        """Account for a finished call that `admit` let through."""
        if self.mode is not Mode.NORMAL:
            return NO_TRANSITIONS
        if probe:
            return self._record_probe(now, outcome)
        if self.state is not State.CLOSED or outcome is Outcome.IGNORED:
            return NO_TRANSITIONS  # started before a trip, or not countable
        failed = outcome is Outcome.FAILURE
        why = None
        for tracker in self.trackers:
            why = tracker.record(now, failed, duration) or why
        if why is not None:
            return (self._to_open(now, why),)
        return NO_TRANSITIONS

    def retry_after(self, now: float) -> float:
        """Seconds until a rejected caller may try again (0.0 when calls are admitted)."""
        if self.mode is Mode.FORCED_OPEN:
            return math.inf
        if self.state is State.OPEN:
            return max(0.0, self.open_until - now)
        if self.state is State.HALF_OPEN:
            cap = self.config.max_half_open_time
            return max(0.0, self.half_open_since + cap - now) if cap is not None else 1.0
        return 0.0

    @property
    def visible_state(self) -> State:
        """The state callers see (a disabled breaker reads CLOSED, a forced one OPEN)."""
        if self.mode is Mode.DISABLED:
            return State.CLOSED
        if self.mode is Mode.FORCED_OPEN:
            return State.OPEN
        return self.state

    # -- manual control --------------------------------------------------------------------

    def force_open(self, now: float) -> tuple[Transition, ...]:
        """Reject every call until `reset`."""
        self.mode = Mode.FORCED_OPEN
        if self.state is State.OPEN:
            return NO_TRANSITIONS
        return (self._move(State.OPEN, now, "forced open"),)

    def disable(self, now: float) -> tuple[Transition, ...]:
        """Admit every call and record nothing until `reset`."""
        self.mode = Mode.DISABLED
        return self._close(now, "disabled") if self.state is not State.CLOSED else NO_TRANSITIONS

    def reset(self, now: float) -> tuple[Transition, ...]:
        """Back to a fresh CLOSED circuit in normal mode."""
        self.mode = Mode.NORMAL
        self.opens = 0
        if self.state is State.CLOSED:
            for tracker in self.trackers:
                tracker.reset()
            return NO_TRANSITIONS
        return self._close(now, "reset")

    def adopt(
        self, now: float, state: State, version: int, remaining: float, reason: str, opens: int
    ) -> tuple[Transition, ...]:
        """Take a state decided elsewhere (a shared store) if it is newer than ours."""
        if version <= self.version or self.mode is not Mode.NORMAL:
            return NO_TRANSITIONS
        previous = self.state
        self.version = version - 1  # _move adds one
        self.opens = opens
        if state is State.CLOSED:
            self._reset_counters()
        elif state is State.OPEN:
            self.opened_at = now
            self.open_until = now + max(0.0, remaining)
        else:
            self.half_open_since = now
            self.probes_admitted = self.config.half_open_max_calls  # probes belong to the fleet
            self.probe_successes = 0
        moved = self._move(state, now, reason)
        return (moved,) if previous is not state else NO_TRANSITIONS

    # -- internals -------------------------------------------------------------------------

    def _rejected(self) -> Admission:
        return Admission.ADMIT if self.config.metrics_only else Admission.REJECT

    def _half_open_expired(self, now: float) -> bool:
        cap = self.config.max_half_open_time
        return cap is not None and now - self.half_open_since >= cap

    def _record_probe(self, now: float, outcome: Outcome) -> tuple[Transition, ...]:
        if self.state is not State.HALF_OPEN:
            return NO_TRANSITIONS  # a stale probe from before a forced move
        if outcome is Outcome.IGNORED:
            self.probes_admitted = max(0, self.probes_admitted - 1)
            return NO_TRANSITIONS
        if outcome is Outcome.FAILURE:
            return (self._to_open(now, "probe failed"),)
        self.probe_successes += 1
        if self.probe_successes >= self.config.success_threshold:
            return self._close(now, f"{self.probe_successes} probe(s) succeeded")
        return NO_TRANSITIONS

    def _to_open(self, now: float, reason: str) -> Transition:
        self.opens += 1
        wait = self.config.backoff.delay(self.opens, self.jitter())
        self.opened_at = now
        self.open_until = now + wait
        return self._move(State.OPEN, now, reason)

    def _to_half_open(self, now: float) -> Transition:
        self.half_open_since = now
        self.probes_admitted = 0
        self.probe_successes = 0
        return self._move(State.HALF_OPEN, now, "open wait over")

    def _close(self, now: float, reason: str) -> tuple[Transition, ...]:
        self.opens = 0
        self._reset_counters()
        return (self._move(State.CLOSED, now, reason),)

    def _reset_counters(self) -> None:
        self.probes_admitted = 0
        self.probe_successes = 0
        for tracker in self.trackers:
            tracker.reset()

    def _move(self, to: State, now: float, reason: str) -> Transition:
        self.version += 1
        transition = Transition(self.state, to, now, reason, self.version)
        self.state = to
        self.reason = reason
        return transition

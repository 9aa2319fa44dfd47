"""The pure breaker state machine: decisions from (state, clock time, outcomes), no I/O.

Drivers (the CircuitBreaker facade, the stores) hold the lock, read the clock, call `admit` and
`record`, and act on the Admission and Transitions returned (tenacity's `iter()` habit).

Rounds: every transition starts a new round (`round`, never reused, never decreasing). A caller
keeps the round its call was admitted in and passes it back with the outcome: an outcome from
any other round is stale and changes nothing (a call that started before a trip, a probe of an
earlier half-open round).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Final

from .config import BreakerConfig
from .policies import TripTracker
from .probes import ProbeRound
from .state import Admission, Mode, Outcome, Reason, State, Transition

NO_TRANSITIONS: Final[tuple[Transition, ...]] = ()


class BreakerMachine:
    """State, counters and rules of one circuit."""

    __slots__ = (
        "config",
        "detail",
        "half_open_since",
        "jitter",
        "mode",
        "open_until",
        "opened_at",
        "opens",
        "probes",
        "reason",
        "round",
        "state",
        "trackers",
        "version",
    )

    def __init__(self, config: BreakerConfig, jitter: Callable[[], float] = random.random) -> None:
        self.config = config
        self.jitter = jitter
        self.state = State.CLOSED
        self.mode = Mode.NORMAL
        self.version = 0  # orders states shared between processes (a store may set it)
        self.round = 1  # this machine's own epoch: +1 on every transition, never reused
        self.reason: str = ""
        self.detail = ""
        self.opened_at = 0.0
        self.open_until = 0.0
        self.opens = 0  # consecutive openings without a close, for the backoff
        self.half_open_since = 0.0
        self.probes = ProbeRound(config)
        self.trackers: list[TripTracker] = [p.tracker() for p in config.policies]

    # -- decisions -------------------------------------------------------------------------

    def admit(self, now: float) -> tuple[Admission, tuple[Transition, ...]]:
        """May a call start now? Moves OPEN → HALF_OPEN when the wait is over.

        A PROBE's ticket is `probes.issued` right after this returns (read it under the same
        lock); the round is `round`.
        """
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
            cap = self.config.max_half_open_time
            moved = self._to_open(now, Reason.HALF_OPEN_TIMEOUT, f"half-open for {cap}s")
            return self._rejected(), (moved,)
        if self.probes.take(now):
            return Admission.PROBE, transitions
        return self._rejected(), transitions

    def record(
        self,
        now: float,
        outcome: Outcome,
        probe: bool,
        duration: float = 0.0,
        admitted_in: int = 0,
        ticket: int = 0,
    ) -> tuple[Transition, ...]:
        """Account for a finished call admitted in round `admitted_in` (0: the current round).

        An outcome from another round changes nothing. `ticket` is a probe's ticket.
        """
        if self.mode is not Mode.NORMAL or (admitted_in and admitted_in != self.round):
            return NO_TRANSITIONS
        if probe:
            return self._record_probe(now, outcome, duration, ticket)
        if self.state is not State.CLOSED or outcome is Outcome.IGNORED:
            return NO_TRANSITIONS  # not countable
        failed = outcome is Outcome.FAILURE
        tripped: TripTracker | None = None
        detail = ""
        for tracker in self.trackers:
            why = tracker.record(now, failed, duration)
            if why is not None:
                tripped, detail = tracker, why
        if tripped is not None:
            return (self._to_open(now, tripped.reason, detail),)
        return NO_TRANSITIONS

    def retry_after(self, now: float) -> float:
        """Seconds until a rejected caller may try again (0.0 when calls are admitted)."""
        if self.mode is Mode.FORCED_OPEN:
            return math.inf
        if self.state is State.OPEN:
            return max(0.0, self.open_until - now)
        if self.state is State.HALF_OPEN:
            # A probe may report any moment; a lost one's slot frees when its lease runs out.
            wait = min(1.0, self.probes.lease_left(now))
            cap = self.config.max_half_open_time
            if cap is not None and wait > 0.0:
                wait = min(wait, max(0.0, self.half_open_since + cap - now))
            return wait
        return 0.0

    @property
    def visible_state(self) -> State:
        """The state callers see (a disabled breaker reads CLOSED, a forced one OPEN)."""
        if self.mode is Mode.DISABLED:
            return State.CLOSED
        if self.mode is Mode.FORCED_OPEN:
            return State.OPEN
        return self.state

    @property
    def refusal(self) -> str:
        """The reason code a refused call is given."""
        if self.mode is Mode.FORCED_OPEN:
            return Reason.FORCED_OPEN
        if self.state is State.HALF_OPEN:
            return Reason.PROBE_BUDGET
        return self.reason

    # -- manual control --------------------------------------------------------------------

    def force_open(self, now: float) -> tuple[Transition, ...]:
        """Reject every call until `reset`."""
        self.mode = Mode.FORCED_OPEN
        if self.state is State.OPEN:
            self.round += 1  # probes and calls of the open circuit's round end here
            return NO_TRANSITIONS
        return (self._move(State.OPEN, now, Reason.FORCED_OPEN),)

    def disable(self, now: float) -> tuple[Transition, ...]:
        """Admit every call and record nothing until `reset`."""
        self.mode = Mode.DISABLED
        if self.state is not State.CLOSED:
            return self._close(now, Reason.DISABLED)
        self.round += 1
        return NO_TRANSITIONS

    def reset(self, now: float) -> tuple[Transition, ...]:
        """Back to a fresh CLOSED circuit in normal mode."""
        self.mode = Mode.NORMAL
        self.opens = 0
        if self.state is State.CLOSED:
            self.round += 1  # calls admitted before the reset belong to the old counts
            for tracker in self.trackers:
                tracker.reset()
            return NO_TRANSITIONS
        return self._close(now, Reason.RESET)

    def adopt(
        self,
        now: float,
        state: State,
        version: int,
        remaining: float,
        reason: str,
        opens: int,
        detail: str = "",
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
            self.probes.start()
            self.probes.admitted = self.probes.budget  # probes belong to the fleet
        moved = self._move(state, now, reason, detail)
        return (moved,) if previous is not state else NO_TRANSITIONS

    # -- internals -------------------------------------------------------------------------

    def _rejected(self) -> Admission:
        return Admission.ADMIT if self.config.metrics_only else Admission.REJECT

    def _half_open_expired(self, now: float) -> bool:
        cap = self.config.max_half_open_time
        return cap is not None and now - self.half_open_since >= cap

    def _record_probe(
        self, now: float, outcome: Outcome, duration: float, ticket: int
    ) -> tuple[Transition, ...]:
        if self.state is not State.HALF_OPEN:
            return NO_TRANSITIONS  # a probe from before a forced move
        verdict = self.probes.settle(outcome, duration, ticket)
        if verdict is None:
            return NO_TRANSITIONS
        to, reason, detail = verdict
        if to is State.OPEN:
            return (self._to_open(now, reason, detail),)
        return self._close(now, reason, detail)

    def _to_open(self, now: float, reason: str, detail: str = "") -> Transition:
        self.opens += 1
        wait = self.config.backoff.delay(self.opens, self.jitter())
        self.opened_at = now
        self.open_until = now + wait
        return self._move(State.OPEN, now, reason, detail)

    def _to_half_open(self, now: float) -> Transition:
        self.half_open_since = now
        self.probes.start()
        return self._move(State.HALF_OPEN, now, Reason.OPEN_WAIT_OVER)

    def _close(self, now: float, reason: str, detail: str = "") -> tuple[Transition, ...]:
        self.opens = 0
        self._reset_counters()
        return (self._move(State.CLOSED, now, reason, detail),)

    def _reset_counters(self) -> None:
        self.probes.start()
        for tracker in self.trackers:
            tracker.reset()

    def _move(self, to: State, now: float, reason: str, detail: str = "") -> Transition:
        # The round moves before the state: a lock-free reader that sees the new state never
        # pairs it with the old round (see BreakerSlot.admit).
        self.version += 1
        self.round += 1
        transition = Transition(self.state, to, now, reason, self.version, detail)
        self.state = to
        self.reason = reason
        self.detail = detail
        return transition

"""The store seam: where a breaker's state lives, and the slot that drives the pure machine.

A `Store` hands out one `BreakerSlot` per breaker name. The slot owns the machine (for shared
stores: the *local view* of a shared state), a short lock around machine mutations (never held
across the user's call), listeners, and counters. Backends subclass `BreakerSlot` and override the
hooks `_admit_off_closed`, `_after_transitions` and `_after_outcome`.

Every admission carries the round it was made in (and a probe its ticket); the outcome goes back
with them, and only an outcome of the current round counts (see core/machine.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

from ..core.classify import FailureInfo
from ..core.config import BreakerConfig
from ..core.fast_view import FastView
from ..core.machine import NO_TRANSITIONS, BreakerMachine
from ..core.state import Admission, Mode, Outcome, Scope, State, Transition
from ..events import OutcomeEvent, OutcomeListener, TransitionEvent, TransitionListener
from ..snapshot import BreakerSnapshot, CallCounts, PolicyWindow

Clock = Callable[[], float]
Admitted = tuple[Admission, int, int]  # (admission, round, probe ticket or 0)
log = logging.getLogger("cascadebreaker")
_ADMIT = Admission.ADMIT


@runtime_checkable
class Store(Protocol):
    """Where breaker state lives. Implement this to add a backend."""

    def slot(self, name: str, config: BreakerConfig, clock: Clock) -> BreakerSlot:
        """Return the slot for breaker `name`, creating it on first use."""
        ...

    def close(self) -> None:
        """Release connections and background workers."""
        ...


class BreakerSlot:
    """One breaker's state and the thin driver around its pure machine."""

    # Slots: the compiled sidecar reads `fast`, `dirty` and `successes` for every request, and
    # a slot is a descriptor found by the type's cache, a dict entry a look-up more. A subclass
    # without slots of its own (RedisSlot, a backend's) has a dict for its other attributes.
    __slots__ = (
        "_timed",
        "clock",
        "config",
        "dirty",
        "failures",
        "fast",
        "ignored",
        "last_failure",
        "lock",
        "machine",
        "name",
        "outcome_listeners",
        "rejections",
        "successes",
        "transition_listeners",
        "view",
    )

    # `fast` is read without the lock on every call: the current round while a success needs
    # no bookkeeping but `successes += 1` (consecutive policy, CLOSED, normal mode, no failure
    # run in progress), else None. One read gives the decision and the round, and a call that
    # finds it unchanged when it succeeds ends lock-free; `is not None` is a single jump,
    # cheaper than an int's truth test.
    fast: int | None
    dirty: bool  # a failure run is in progress: `fast` is None until a success ends it

    def __init__(self, name: str, config: BreakerConfig, clock: Clock) -> None:
        self.name = name
        self.config = config
        self.clock = clock
        self.machine = BreakerMachine(config)
        self.lock = threading.Lock()
        self.transition_listeners: list[TransitionListener] = []
        self.outcome_listeners: list[OutcomeListener] = []
        self.successes = 0
        self.failures = 0
        self.ignored = 0
        self.rejections = 0
        self.dirty = False
        self.last_failure: FailureInfo | None = None
        self._timed = config.needs_duration
        self.view = FastView()
        self._refresh_fast()

    # -- the driver ------------------------------------------------------------------------

    def admit(self) -> Admitted:
        """Decide whether a call may start now: (admission, round, probe ticket or 0)."""
        machine = self.machine
        round_ = machine.round  # read before the state: a move bumps the round first
        if machine.state is State.CLOSED and machine.mode is Mode.NORMAL:
            return _ADMIT, round_, 0
        return self._admit_off_closed(self.clock())

    async def aadmit(self) -> Admitted:
        """Async twin of `admit` for stores that must ask a server off the closed path."""
        return self.admit()

    def record(
        self,
        outcome: Outcome,
        probe: bool,
        duration: float = 0.0,
        admitted_in: int = 0,
        ticket: int = 0,
        failure: FailureInfo | None = None,
    ) -> None:
        """Account for a finished call admitted in round `admitted_in` (0: the current one);
        only an outcome of the current round counts. Never raises."""
        with self.lock:
            machine = self.machine
            current = not admitted_in or admitted_in == machine.round
            transitions = NO_TRANSITIONS
            dirty = self.dirty
            if current:
                transitions = machine.record(
                    self.clock(), outcome, probe, duration, admitted_in, ticket
                )
                if outcome is Outcome.FAILURE:
                    self.dirty = machine.state is State.CLOSED
                    if failure is not None and machine.mode is Mode.NORMAL:
                        self.last_failure = failure
                elif outcome is Outcome.SUCCESS:
                    self.dirty = False  # an ignored outcome leaves a failure run as it was
            if outcome is Outcome.SUCCESS:
                self.successes += 1
            elif outcome is Outcome.FAILURE:
                self.failures += 1
            else:
                self.ignored += 1
            if transitions or self.dirty is not dirty:
                self._refresh_fast()
        self._after_outcome(outcome, probe, duration, admitted_in, ticket, current, failure)
        if self.outcome_listeners:
            self._emit_outcome(outcome, probe, duration)
        if transitions:
            self._after_transitions(transitions)

    def rejected(self) -> None:
        """Count a rejection (listeners hear an outcome of None)."""
        self.rejections += 1
        if self.outcome_listeners:
            self._emit_outcome(None, False, 0.0)

    def retry_after(self) -> float:
        """Seconds until the circuit admits a call again."""
        return self.machine.retry_after(self.clock())

    @property
    def timed(self) -> bool:
        """True when calls must be timed (a slow-call policy is configured)."""
        return self._timed

    def control(self, action: str) -> None:
        """Manual control: 'force_open', 'disable' or 'reset'."""
        with self.lock:
            now = self.clock()
            if action == "force_open":
                transitions = self.machine.force_open(now)
            elif action == "disable":
                transitions = self.machine.disable(now)
            elif action == "reset":
                transitions = self.machine.reset(now)
                self.dirty = False
            else:
                raise ValueError(f"unknown control action {action!r}")
            self._refresh_fast()
        self._after_control(action)
        if transitions:
            self._after_transitions(transitions)

    @property
    def scope(self) -> Scope:
        """Whose state this slot shows (a memory store: always this process's own)."""
        return Scope.LOCAL

    def probes_out(self) -> int:
        """Half-open probes admitted and not yet reported, as far as this process knows."""
        m = self.machine
        return m.probes.admitted if m.state is State.HALF_OPEN else 0

    def snapshot(self) -> BreakerSnapshot:
        """A read-only view of the state and counters."""
        with self.lock:
            m = self.machine
            now = self.clock()
            retry = m.retry_after(now)
            windows = tuple(PolicyWindow(t.reason, *t.counts(now)) for t in m.trackers)
            state, reason, detail = m.visible_state, m.reason, m.detail
            opened_at = m.opened_at if state is not State.CLOSED else None
            round_, version, mode = m.round, m.version, m.mode
        return BreakerSnapshot(
            name=self.name,
            state=state,
            mode=mode,
            scope=self.scope,
            reason=reason,
            detail=detail,
            retry_after=None if retry == float("inf") else round(retry, 3),
            opened_at=opened_at,
            probes_out=self.probes_out(),
            round=round_,
            version=version,
            windows=windows,
            calls=CallCounts(self.success_count(), self.failures, self.ignored, self.rejections),
            last_failure=self.last_failure,
        )

    def add_outcome_listener(self, listener: OutcomeListener) -> None:
        """Hear every call outcome (turns off the lock-free closed path)."""
        self.outcome_listeners.append(listener)
        self._refresh_fast()

    # -- hooks for backends ------------------------------------------------------------------

    def _admit_off_closed(self, now: float) -> Admitted:
        with self.lock:
            m = self.machine
            admission, transitions = m.admit(now)
            ticket = m.probes.issued if admission is Admission.PROBE else 0
            round_ = m.round
            if transitions:
                self._refresh_fast()
        if transitions:
            self._after_transitions(transitions)
        return admission, round_, ticket

    def _after_outcome(
        self,
        outcome: Outcome,
        probe: bool,
        duration: float,
        admitted_in: int,
        ticket: int,
        current: bool,
        failure: FailureInfo | None,
    ) -> None:
        """Called after every recorded outcome, outside the lock (`current`: it counted)."""

    def _after_control(self, action: str) -> None:
        """Called after a manual control action, outside the lock."""

    def _after_transitions(self, transitions: Iterable[Transition]) -> None:
        """Called after the machine moved, outside the lock: tell the listeners."""
        for t in transitions:
            event = TransitionEvent(
                self.name, t.from_state, t.to_state, t.reason, t.at, t.version, t.detail, self.scope
            )
            for listener in list(self.transition_listeners):
                try:
                    listener(event)
                except Exception:  # a listener must not break the caller's call
                    log.exception("transition listener failed for breaker %r", self.name)

    def _refresh_fast(self) -> None:
        """Recompute `fast`; call with the lock held after any state change."""
        m = self.machine
        fast = (
            m.state is State.CLOSED
            and m.mode is not Mode.FORCED_OPEN
            and self.config.consecutive_only
            and not self._timed
            and not self.outcome_listeners
            and not self.dirty
        )
        self.fast = self.view.fast = m.round if fast else None

    def success_count(self) -> int:
        """Successes so far: the core's and compiled drivers' lock-free ones included."""
        return self.successes + self.view.successes

    def _emit_outcome(self, outcome: Outcome | None, probe: bool, duration: float) -> None:
        event = OutcomeEvent(self.name, outcome, probe, duration, self.machine.visible_state)
        for listener in list(self.outcome_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("outcome listener failed for breaker %r", self.name)

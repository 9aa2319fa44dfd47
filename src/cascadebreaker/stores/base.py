"""The store seam: where a breaker's state lives, and the slot that drives the pure machine.

A `Store` hands out one `BreakerSlot` per breaker name. The slot owns the machine (for shared
stores: the *local view* of a shared state), a short lock around machine mutations (never held
across the user's call), listeners, and counters. Backends subclass `BreakerSlot` and override the
hooks `_admit_off_closed`, `_after_transitions` and `_after_outcome`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from ..core.config import BreakerConfig
from ..core.machine import BreakerMachine
from ..core.state import Admission, Mode, Outcome, State, Transition
from ..events import OutcomeEvent, OutcomeListener, TransitionEvent, TransitionListener

Clock = Callable[[], float]
log = logging.getLogger("cascadebreaker")


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

    # `fast` is read without the lock on every call: True while the closed path needs nothing but
    # "reset the failure run after a success" (consecutive policy, CLOSED, normal mode).
    fast: bool
    dirty: bool  # a failure run is in progress; the next fast-path success must record

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
        self._timed = config.needs_duration
        self._refresh_fast()

    # -- the driver ------------------------------------------------------------------------

    def admit(self) -> Admission:
        """Decide whether a call may start now."""
        machine = self.machine
        if machine.state is State.CLOSED and machine.mode is Mode.NORMAL:
            return Admission.ADMIT
        return self._admit_off_closed(self.clock())

    async def aadmit(self) -> Admission:
        """Async twin of `admit` for stores that must ask a server off the closed path."""
        return self.admit()

    def record(self, outcome: Outcome, probe: bool, duration: float = 0.0) -> None:
        """Account for a finished call; never raises."""
        with self.lock:
            transitions = self.machine.record(self.clock(), outcome, probe, duration)
            if outcome is Outcome.FAILURE:
                self.dirty = self.machine.state is State.CLOSED
            elif outcome is Outcome.SUCCESS:
                self.dirty = False  # an ignored outcome leaves a failure run as it was
            if outcome is Outcome.SUCCESS:
                self.successes += 1
            elif outcome is Outcome.FAILURE:
                self.failures += 1
            else:
                self.ignored += 1
            if transitions:
                self._refresh_fast()
        self._after_outcome(outcome, probe, duration)
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

    def snapshot(self) -> dict[str, Any]:
        """A JSON-friendly view of the state and counters."""
        m = self.machine
        retry = m.retry_after(self.clock())
        return {
            "name": self.name,
            "state": m.visible_state.value,
            "mode": m.mode.value,
            "retry_after": None if retry == float("inf") else round(retry, 3),
            "reason": m.reason,
            "version": m.version,
            "calls": {
                "success": self.successes,
                "failure": self.failures,
                "ignored": self.ignored,
                "rejected": self.rejections,
            },
        }

    def add_outcome_listener(self, listener: OutcomeListener) -> None:
        """Hear every call outcome (turns off the lock-free closed path)."""
        self.outcome_listeners.append(listener)
        self._refresh_fast()

    # -- hooks for backends ------------------------------------------------------------------

    def _admit_off_closed(self, now: float) -> Admission:
        with self.lock:
            admission, transitions = self.machine.admit(now)
            if transitions:
                self._refresh_fast()
        if transitions:
            self._after_transitions(transitions)
        return admission

    def _after_outcome(self, outcome: Outcome, probe: bool, duration: float) -> None:
        """Called after every recorded outcome, outside the lock."""

    def _after_control(self, action: str) -> None:
        """Called after a manual control action, outside the lock."""

    def _after_transitions(self, transitions: Iterable[Transition]) -> None:
        """Called after the machine moved, outside the lock: tell the listeners."""
        for t in transitions:
            event = TransitionEvent(self.name, t.from_state, t.to_state, t.reason, t.at, t.version)
            for listener in list(self.transition_listeners):
                try:
                    listener(event)
                except Exception:  # a listener must not break the caller's call
                    log.exception("transition listener failed for breaker %r", self.name)

    def _refresh_fast(self) -> None:
        """Recompute `fast`; call with the lock held after any state change."""
        m = self.machine
        self.fast = (
            m.state is State.CLOSED
            and m.mode is not Mode.FORCED_OPEN
            and self.config.consecutive_only
            and not self._timed
            and not self.outcome_listeners
        )

    def _emit_outcome(self, outcome: Outcome | None, probe: bool, duration: float) -> None:
        event = OutcomeEvent(self.name, outcome, probe, duration, self.machine.visible_state)
        for listener in list(self.outcome_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("outcome listener failed for breaker %r", self.name)

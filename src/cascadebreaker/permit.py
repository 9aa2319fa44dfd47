"""Permit: one admitted call whose outcome the caller records (proxies, context managers)."""

from __future__ import annotations

from typing import Final

from .core.classify import Classifier, FailureInfo
from .core.state import Outcome
from .stores.base import BreakerSlot

_SUCCESS: Final = Outcome.SUCCESS
_FAILURE: Final = Outcome.FAILURE


class Permit:
    """Record exactly one of success(), failure() or ignore(); later calls are no-ops.

    A permit belongs to the round (epoch) of the circuit it was admitted in, and a probe carries
    its ticket: its outcome settles that round only. If the circuit moved on meanwhile (a trip, a
    new half-open round, a reset), the outcome is counted in the call totals and changes nothing.
    """

    __slots__ = ("_classifier", "_done", "_slot", "_start", "probe", "round", "ticket")

    def __init__(
        self,
        slot: BreakerSlot,
        classifier: Classifier,
        probe: bool,
        start: float,
        round: int = 0,
        ticket: int = 0,
    ) -> None:
        self._slot = slot
        self._classifier = classifier
        self.probe = probe
        self._start = start
        self.round = round  # 0: whatever round is current when the outcome arrives
        self.ticket = ticket
        self._done = False

    def success(self) -> None:
        """The call succeeded."""
        slot = self._slot
        if not self._done and not self.probe and slot.fast == self.round:
            self._done = True
            slot.successes += 1  # `_finish`'s lock-free path, inlined: the common outcome
            return
        self._finish(_SUCCESS, None)

    def failure(self, exc: BaseException | None = None) -> None:
        """The call failed; with an exception, the breaker's classifier decides how it counts."""
        if exc is None:
            self._finish(_FAILURE, None)
        else:
            self.settle_exception(exc)

    def ignore(self) -> None:
        """The call neither succeeded nor failed (e.g. the client went away)."""
        self._finish(Outcome.IGNORED, None)

    def settle_exception(self, exc: BaseException) -> Outcome:
        """Classify and record a raised exception; return how it counted. A classifier that
        raises counts the call as failed, then surfaces."""
        try:
            outcome = self._classifier.exception(exc)
        except Exception:
            self._finish(_FAILURE, FailureInfo.of_exception(exc))
            raise
        failure = FailureInfo.of_exception(exc) if outcome is _FAILURE else None
        self._finish(outcome, failure)
        return outcome

    def settle_result(self, value: object) -> Outcome:
        """Classify and record a returned value; return how it counted."""
        outcome = self._classifier.result(value)
        self._finish(outcome, FailureInfo.of_result(value) if outcome is _FAILURE else None)
        return outcome

    def _finish(self, outcome: Outcome, failure: FailureInfo | None) -> None:
        if self._done:
            return
        self._done = True
        slot = self._slot
        if outcome is _SUCCESS and not self.probe and slot.fast == self.round:
            slot.successes += 1  # nothing to reset: the lock-free path's bookkeeping
            return
        duration = slot.clock() - self._start if slot.timed else 0.0
        slot.record(outcome, self.probe, duration, self.round, self.ticket, failure)

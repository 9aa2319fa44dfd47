"""Permit: one admitted call whose outcome the caller records (proxies, context managers)."""

from __future__ import annotations

from .core.classify import Classifier
from .core.state import Outcome
from .stores.base import BreakerSlot

_SUCCESS = Outcome.SUCCESS


class Permit:
    """Record exactly one of success(), failure() or ignore(); later calls are no-ops."""

    __slots__ = ("_classifier", "_done", "_slot", "_start", "probe")

    def __init__(self, slot: BreakerSlot, classifier: Classifier, probe: bool, start: float):
        self._slot = slot
        self._classifier = classifier
        self.probe = probe
        self._start = start
        self._done = False

    def success(self) -> None:
        """The call succeeded."""
        self._finish(Outcome.SUCCESS)

    def failure(self, exc: BaseException | None = None) -> None:
        """The call failed; with an exception, the breaker's classifier decides how it counts."""
        self._finish(Outcome.FAILURE if exc is None else self._classifier.exception(exc))

    def ignore(self) -> None:
        """The call neither succeeded nor failed (e.g. the client went away)."""
        self._finish(Outcome.IGNORED)

    def _finish(self, outcome: Outcome) -> None:
        if self._done:
            return
        self._done = True
        slot = self._slot
        if outcome is _SUCCESS and slot.fast and not slot.dirty and not self.probe:
            slot.successes += 1
            return
        slot.record(outcome, self.probe, slot.clock() - self._start if slot.timed else 0.0)

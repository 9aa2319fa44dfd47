"""The built-in logging listeners: transitions at WARNING (on by default), outcomes opt-in.

Every record carries structured fields in `extra` (`breaker`, `from_state`, `to_state`,
`reason`, `retry_after`), so structlog, python-json-logger and friends pick them up as keys
instead of parsing the message.
"""

from __future__ import annotations

import logging
import math
import typing
import weakref

from .events import OutcomeEvent, TransitionEvent

if typing.TYPE_CHECKING:
    from .breaker import CircuitBreaker

__all__ = ["LOGGER_NAME", "OutcomeLogger", "TransitionLogger"]

LOGGER_NAME = "cascadebreaker.transitions"


class TransitionLogger:
    """A transition listener that logs each state change with structured `extra` fields."""

    def __init__(
        self,
        breaker: CircuitBreaker,
        logger: logging.Logger | None = None,
        level: int = logging.WARNING,
    ) -> None:
        # A weak reference: the breaker holds this listener, and a cycle would keep every
        # breaker alive until the cycle collector runs.
        self._breaker = weakref.ref(breaker)
        self.logger = logger if logger is not None else logging.getLogger(LOGGER_NAME)
        self.level = level

    def __call__(self, event: TransitionEvent) -> None:
        """Log one transition (cheap when the level is disabled)."""
        if not self.logger.isEnabledFor(self.level):
            return
        breaker = self._breaker()
        retry = breaker.retry_after if breaker and event.to_state.value == "OPEN" else 0.0
        retry_after = None if math.isinf(retry) else round(retry, 3)
        wait = "" if retry_after is None or not retry_after else f", retry after {retry_after}s"
        why = event.reason or "unknown"
        if event.detail:
            why = f"{why}: {event.detail}"
        self.logger.log(
            self.level,
            "circuit %r %s -> %s (%s)%s",
            event.name,
            event.from_state.value,
            event.to_state.value,
            why,
            wait,
            extra={
                "breaker": event.name,
                "from_state": event.from_state.value,
                "to_state": event.to_state.value,
                "reason": event.reason,
                "detail": event.detail,
                "scope": event.scope.value,
                "retry_after": retry_after,
                "version": event.version,
            },
        )


class OutcomeLogger:
    """An outcome listener logging every call at DEBUG (opt-in: it costs the lock-free path)."""

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.DEBUG) -> None:
        self.logger = logger if logger is not None else logging.getLogger("cascadebreaker.calls")
        self.level = level

    def __call__(self, event: OutcomeEvent) -> None:
        """Log one call outcome (`rejected` when the call never ran)."""
        if not self.logger.isEnabledFor(self.level):
            return
        outcome = "rejected" if event.outcome is None else event.outcome.name.lower()
        self.logger.log(
            self.level,
            "call through %r: %s",
            event.name,
            outcome,
            extra={
                "breaker": event.name,
                "outcome": outcome,
                "probe": event.probe,
                "duration": event.duration,
                "state": event.state.value,
            },
        )

"""Logging for what a peer can trigger at will: at most one line per interval, then a count."""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """At most one line per `interval` seconds; the next line says how many were left out.

    Anything a client can trigger at will (bad requests, stalls, the connection cap) is logged
    through one of these, so no client can fill the log.
    """

    def __init__(self, logger: logging.Logger, level: int, interval: float = 10.0) -> None:
        self.logger = logger
        self.level = level
        self.interval = interval
        self.suppressed = 0
        self._next = 0.0

    def __call__(self, message: str, *args: Any, exc_info: Any = None) -> None:
        """Log `message % args` unless a line went out less than `interval` seconds ago."""
        if not self.logger.isEnabledFor(self.level):
            return
        now = time.monotonic()
        if now < self._next:
            self.suppressed += 1
            return
        self._next = now + self.interval
        if self.suppressed:
            message += " (%d more like this in the last %gs not logged)"
            args = (*args, self.suppressed, self.interval)
            self.suppressed = 0
        self.logger.log(self.level, message, *args, exc_info=exc_info)

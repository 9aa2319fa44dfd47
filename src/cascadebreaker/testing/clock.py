"""A clock that tests move by hand, so breakers recover without sleeping."""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """A monotonic clock for `CircuitBreaker(clock=...)`; `advance()` moves it forward."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds` (never backwards: it is monotonic)."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back: advance({seconds!r})")
        self.now += seconds

"""Sliding windows of call outcomes: count-based (last N calls) and time-based (last T seconds)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


class OutcomeWindow(ABC):
    """Counts calls and 'hits' (failures or slow calls) over a sliding window."""

    __slots__ = ()

    @abstractmethod
    def add(self, now: float, hit: bool) -> None:
        """Add one call."""

    @abstractmethod
    def totals(self, now: float) -> tuple[int, int]:
        """Return (calls, hits) currently in the window."""

    @abstractmethod
    def clear(self) -> None:
        """Empty the window."""


@dataclass(frozen=True, slots=True)
class CountWindow:
    """The last `size` calls."""

    size: int = 100

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"window.size must be >= 1, got {self.size!r}")

    def new(self) -> OutcomeWindow:
        """Return an empty window of this shape."""
        return _CountRing(self.size)


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """The calls of the last `seconds`, kept in `buckets` slices (older slices drop whole)."""

    seconds: float = 60.0
    buckets: int = 10

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise ValueError(f"window.seconds must be > 0, got {self.seconds!r}")
        if self.buckets < 1:
            raise ValueError(f"window.buckets must be >= 1, got {self.buckets!r}")

    def new(self) -> OutcomeWindow:
        """Return an empty window of this shape."""
        return _TimeBuckets(self.seconds, self.buckets)


class _CountRing(OutcomeWindow):
    __slots__ = ("calls", "hits", "pos", "ring", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.ring = bytearray(size)  # 0 empty, 1 call, 2 hit
        self.pos = 0
        self.calls = 0
        self.hits = 0

    def add(self, now: float, hit: bool) -> None:
        old = self.ring[self.pos]
        if old:
            self.calls -= 1
            if old == 2:
                self.hits -= 1
        self.ring[self.pos] = 2 if hit else 1
        self.calls += 1
        if hit:
            self.hits += 1
        self.pos = (self.pos + 1) % self.size

    def totals(self, now: float) -> tuple[int, int]:
        return self.calls, self.hits

    def clear(self) -> None:
        self.ring = bytearray(self.size)
        self.pos = 0
        self.calls = 0
        self.hits = 0


class _TimeBuckets(OutcomeWindow):
    __slots__ = ("calls", "epochs", "hits", "n", "width")

    def __init__(self, seconds: float, buckets: int) -> None:
        self.n = buckets
        self.width = seconds / buckets
        self.epochs = [-1] * buckets  # which slice of time each bucket currently holds
        self.calls = [0] * buckets
        self.hits = [0] * buckets

    def add(self, now: float, hit: bool) -> None:
        epoch = int(now // self.width)
        i = epoch % self.n
        if self.epochs[i] != epoch:
            self.epochs[i] = epoch
            self.calls[i] = 0
            self.hits[i] = 0
        self.calls[i] += 1
        if hit:
            self.hits[i] += 1

    def totals(self, now: float) -> tuple[int, int]:
        oldest = int(now // self.width) - self.n + 1
        calls = hits = 0
        for i in range(self.n):
            if self.epochs[i] >= oldest:
                calls += self.calls[i]
                hits += self.hits[i]
        return calls, hits

    def clear(self) -> None:
        self.epochs = [-1] * self.n
        self.calls = [0] * self.n
        self.hits = [0] * self.n

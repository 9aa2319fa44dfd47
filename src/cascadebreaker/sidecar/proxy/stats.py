"""Per-route call counters and a latency histogram: plain ints on the hot path, read at scrape."""

from __future__ import annotations

from bisect import bisect_left
from typing import Final

# Seconds; the last bucket is +Inf. `Final`, and of any length to mypyc: compiled, a fixed-length
# tuple of floats is kept unboxed, and boxed again (15 float objects) for each `bisect_left`.
LATENCY_BOUNDS: Final[tuple[float, ...]] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

SUCCESS: Final = "success"
OUTCOMES: Final = (
    SUCCESS,
    "failure_status",
    "timeout",
    "connect",
    "reset",
    "protocol",
    "rejected",
    "refused_upstream",  # the upstream's sidecar refused (`ccb-refusal`): not a failure
    # One instance's sidecar refused (503 naming a cause); the call went to the next instance.
    "instance_refused",
    "cancelled",
    # The client's fault, never the upstream's: a stalled body (408), a malformed body (400).
    "client_timeout",
    "bad_request",
)


class RouteStats:
    """Counters of one upstream (or of the inbound app route)."""

    __slots__ = ("latency_buckets", "latency_count", "latency_sum", "others", "successes")

    def __init__(self) -> None:
        # Successes, the outcome of nearly every call, in a plain int (compiled, a native add;
        # a dict entry would be looked up, added as an object and stored for every call).
        self.successes = 0
        self.others = dict.fromkeys(OUTCOMES[1:], 0)  # every other outcome
        self.latency_buckets = [0] * (len(LATENCY_BOUNDS) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0

    @property
    def outcomes(self) -> dict[str, int]:
        """Calls by outcome, in the order of OUTCOMES (a new dict)."""
        return {SUCCESS: self.successes, **self.others}

    def count(self, outcome: str) -> None:
        """Count one call by its outcome."""
        if outcome == SUCCESS:
            self.successes += 1
        else:
            self.others[outcome] += 1

    def observe(self, seconds: float) -> None:
        """Record one call's duration (until the last response byte)."""
        self.latency_buckets[bisect_left(LATENCY_BOUNDS, seconds)] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def snapshot(self) -> dict[str, int]:
        """Outcome counts, for /status."""
        return self.outcomes

"""One half-open round: the probe budget, leases for lost probes, and the verdict on the probes.

A round admits `half_open_max_calls` probes. Each probe gets a ticket (1, 2, ... within the
round). A probe that never reports must not wedge the circuit: once the budget is spent and no
probe was admitted for `probe_lease` seconds, every outstanding slot is taken back and new probes
are admitted. The outcomes of probes taken back still count (they are evidence about the
upstream), but an *ignored* one no longer frees a slot: it gave its slot up already.

Two ways to judge the probes:

- classic (default): the first failed (or slow) probe reopens; `success_threshold` good probes
  close;
- window (`half_open_failure_rate`, resilience4j's semantics): the round's probes are judged by
  their failure rate (and slow-call rate), as soon as the verdict is certain.
"""

from __future__ import annotations

from .config import BreakerConfig
from .state import Outcome, Reason, State

Verdict = tuple[State, Reason, str]  # where the round sends the circuit, why, detail for people


class ProbeRound:
    """Counters of the current half-open round and the rules that judge it."""

    __slots__ = (
        "admitted",
        "budget",
        "calls",
        "failure_rate",
        "failures",
        "issued",
        "lease",
        "lease_until",
        "needed",
        "reclaimed",
        "slow",
        "slow_after",
        "slow_rate",
        "successes",
    )

    def __init__(self, config: BreakerConfig) -> None:
        self.budget = config.half_open_max_calls
        self.needed = config.success_threshold
        self.lease = config.probe_lease
        self.failure_rate = config.half_open_failure_rate
        self.slow_after = config.probe_slow_after
        self.slow_rate = config.probe_slow_rate
        self.start()

    def start(self) -> None:
        """A new round: every counter back to zero."""
        self.admitted = 0  # slots taken and not given back
        self.issued = 0  # tickets handed out this round
        self.reclaimed = 0  # tickets up to this one were taken back by the lease
        self.lease_until = 0.0
        self.calls = 0
        self.successes = 0
        self.failures = 0
        self.slow = 0

    def take(self, now: float) -> int:
        """Admit one probe: its ticket (>= 1), or 0 when every slot is taken."""
        if self.admitted >= self.budget and now >= self.lease_until:
            self.admitted = 0  # presumed lost: their callers died or never reported
            self.reclaimed = self.issued
        if self.admitted >= self.budget:
            return 0
        self.admitted += 1
        self.issued += 1
        self.lease_until = now + self.lease
        return self.issued

    def lease_left(self, now: float) -> float:
        """Seconds until lost probes' slots are taken back (0.0 when a slot is free)."""
        if self.admitted < self.budget:
            return 0.0
        return max(0.0, self.lease_until - now)

    def settle(self, outcome: Outcome, duration: float, ticket: int) -> Verdict | None:
        """Count one probe of this round; return the verdict once it is certain."""
        if outcome is Outcome.IGNORED:
            if not ticket or ticket > self.reclaimed:  # a reclaimed probe gave its slot up already
                self.admitted = max(0, self.admitted - 1)
            return None
        failed = outcome is Outcome.FAILURE
        slow = self.slow_after is not None and duration >= self.slow_after
        self.calls += 1
        self.failures += failed
        self.slow += slow
        if self.failure_rate is None:
            return self._classic(failed, slow, duration)
        return self._window(self.failure_rate)

    def _classic(self, failed: bool, slow: bool, duration: float) -> Verdict | None:
        if failed:
            return State.OPEN, Reason.PROBE_FAILED, "a probe failed"
        if slow:
            return State.OPEN, Reason.PROBE_SLOW, f"a probe took {duration:.3f}s"
        self.successes += 1
        if self.successes >= self.needed:
            return State.CLOSED, Reason.PROBES_SUCCEEDED, f"{self.successes} probe(s) succeeded"
        return None

    def _window(self, rate: float) -> Verdict | None:
        n = self.budget
        if self.failures >= rate * n:
            return State.OPEN, Reason.PROBE_FAILED, f"{self.failures}/{n} probes failed"
        judging_slow = self.slow_after is not None
        if judging_slow and self.slow >= self.slow_rate * n:
            return State.OPEN, Reason.PROBE_SLOW, f"{self.slow}/{n} probes were slow"
        left = max(0, n - self.calls)  # even if every probe still out goes badly...
        if self.failures + left < rate * n and not (
            judging_slow and self.slow + left >= self.slow_rate * n
        ):
            good = self.calls - self.failures
            return State.CLOSED, Reason.PROBES_SUCCEEDED, f"{good}/{self.calls} probes succeeded"
        return None

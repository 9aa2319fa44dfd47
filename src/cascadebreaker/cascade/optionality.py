"""Learned optionality: which dependencies an endpoint survives, from what the sidecar sees.

For an edge `A:e -> B:f` the sidecar sees both halves of one trace: the call to `B:f` that
failed or was refused, and the answer `A:e` still gave. Evidence per edge:

- **survived**: the call to `B:f` failed or was refused and `A:e` answered success anyway
  (a fallback: the page is served, degraded);
- **failed with**: the call to `B:f` failed and `A:e` failed too.

An edge becomes *optional (learned)* once `survived >= threshold` and survived is at least
`ratio` of the evidence; it turns required again once `failed with >= threshold` and survived
falls below `ratio` (between the two the verdict holds: no flapping on one request). Evidence
ages: both counts halve every `half_life` seconds, so what an endpoint did an hour ago weighs
little against what it does now; an edge with no evidence for
`ttl` seconds is forgotten (and required again, like a new edge). Explicit marks (a
`ccb-optional` header, config) always win over what is learned; the graph applies that rule.

`TrickleGate`: an endpoint held unavailable over a learned-required edge lets one request
through every `interval` seconds (like a half-open probe), so that it can show it survives.

Pure: no I/O, the clock is injected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cascadebreaker.cascade.endpoints import Endpoint

__all__ = ["Evidence", "OptionalityRules", "SurvivalLedger", "TrickleGate"]

_Key = tuple[Endpoint, Endpoint]


@dataclass(frozen=True, slots=True)
class OptionalityRules:
    """When evidence makes an edge optional (see the module docstring)."""

    threshold: float = 3.0
    ratio: float = 0.8
    half_life: float = 600.0
    ttl: float = 3600.0
    max_edges: int = 50_000

    def __post_init__(self) -> None:
        if not self.threshold > 0:
            raise ValueError(f"threshold must be > 0, got {self.threshold!r}")
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"ratio must be in (0, 1], got {self.ratio!r}")
        if not (self.half_life > 0 and self.ttl > 0):
            raise ValueError("half_life and ttl must be > 0")
        if self.max_edges < 1:
            raise ValueError(f"max_edges must be >= 1, got {self.max_edges!r}")


@dataclass(frozen=True, slots=True)
class Evidence:
    """The aged evidence of one edge, and the verdict it supports."""

    survived: float
    failed_with: float
    optional: bool


class _Record:
    __slots__ = ("aged_at", "failed_with", "optional", "survived", "updated")

    def __init__(self, now: float) -> None:
        self.survived = 0.0
        self.failed_with = 0.0
        self.optional = False
        self.updated = now  # the last evidence
        self.aged_at = now  # the start of the current half-life period


class SurvivalLedger:
    """Evidence per edge; `observe` says when an edge's learned verdict changed."""

    def __init__(self, clock: Callable[[], float], rules: OptionalityRules | None = None) -> None:
        self._clock = clock
        self.rules = rules or OptionalityRules()
        self._records: dict[_Key, _Record] = {}
        self.dropped = 0  # observations refused because the ledger was full

    def __len__(self) -> int:
        return len(self._records)

    def observe(self, caller: Endpoint, callee: Endpoint, caller_succeeded: bool) -> bool | None:
        """One trace in which the call to `callee` failed or was refused. Returns the new
        verdict (True: optional) when it changed, else None."""
        now = self._clock()
        key = (caller, callee)
        record = self._records.get(key)
        if record is None:
            if len(self._records) >= self.rules.max_edges:
                self.dropped += 1
                return None
            record = self._records[key] = _Record(now)
        self._age(record, now)
        if caller_succeeded:
            record.survived += 1.0
        else:
            record.failed_with += 1.0
        verdict = self._verdict(record)
        if verdict == record.optional:
            return None
        record.optional = verdict
        return verdict

    def evidence(self, caller: Endpoint, callee: Endpoint) -> Evidence | None:
        """The aged evidence of an edge, or None when there is none."""
        record = self._records.get((caller, callee))
        if record is None:
            return None
        factor = self._periods(record, self._clock())[1]
        return Evidence(record.survived * factor, record.failed_with * factor, record.optional)

    def optional(self, caller: Endpoint, callee: Endpoint) -> bool:
        """True when evidence has made the edge optional."""
        record = self._records.get((caller, callee))
        return record is not None and record.optional

    def shown_required(self, caller: Endpoint, callee: Endpoint) -> bool:
        """True when the caller has failed with the callee often enough (aged) that no trickle
        is needed to learn more: it does not survive it."""
        evidence = self.evidence(caller, callee)
        return (
            evidence is not None
            and not evidence.optional
            and evidence.failed_with >= self.rules.threshold
        )

    def learned_optional(self) -> list[_Key]:
        """Every edge evidence has made optional."""
        return [key for key, record in self._records.items() if record.optional]

    def expire(self) -> list[_Key]:
        """Forget edges without evidence for `ttl`; return those that were optional."""
        cutoff = self._clock() - self.rules.ttl
        stale = [key for key, r in self._records.items() if r.updated <= cutoff]
        was_optional = [key for key in stale if self._records[key].optional]
        for key in stale:
            del self._records[key]
        return was_optional

    def _periods(self, record: _Record, now: float) -> tuple[int, float]:
        """Whole half-lives since the record was last aged, and the factor they make."""
        periods = int(max(now - record.aged_at, 0.0) // self.rules.half_life)
        return periods, 0.5**periods

    def _age(self, record: _Record, now: float) -> None:
        # Counts halve once per whole half-life: within one they stay whole numbers.
        periods, factor = self._periods(record, now)
        if periods:
            record.survived *= factor
            record.failed_with *= factor
            record.aged_at += periods * self.rules.half_life
        record.updated = now

    def _verdict(self, record: _Record) -> bool:
        rules = self.rules
        total = record.survived + record.failed_with
        mostly_survived = record.survived >= rules.ratio * total
        if not record.optional:
            return record.survived >= rules.threshold and mostly_survived
        return not (record.failed_with >= rules.threshold and not mostly_survived)


class TrickleGate:
    """One request per `interval` seconds per endpoint (a bounded number of endpoints); the
    first only one interval after the endpoint was first held (as a breaker waits before its
    first probe)."""

    def __init__(
        self, clock: Callable[[], float], interval: float = 1.0, capacity: int = 4096
    ) -> None:
        if not interval > 0 or capacity < 1:
            raise ValueError("interval must be > 0 and capacity >= 1")
        self._clock = clock
        self.interval = interval
        self._capacity = capacity
        # Endpoints held, and when each may next pass: read by the request path to skip
        # `forget` (a Python call) while nothing is held.
        self.held: dict[Endpoint, float] = {}
        self.passed = 0

    def allow(self, endpoint: Endpoint) -> bool:
        """True for the first request of each interval."""
        now = self._clock()
        due = self.held.get(endpoint)
        if due is None:
            if len(self.held) >= self._capacity:
                self.held.clear()  # a bound against a flood of endpoints; it only resets pacing
            self.held[endpoint] = now + self.interval
            return False
        if now < due:
            return False
        self.held[endpoint] = now + self.interval
        self.passed += 1
        return True

    def forget(self, endpoint: Endpoint) -> None:
        """The endpoint is available again: its next hold waits a whole interval first."""
        self.held.pop(endpoint, None)

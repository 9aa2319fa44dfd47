"""What the dashboard knows about sidecars, in its own words (independent of any wire spelling).

Endpoints are strings `"service METHOD /route"`, as every sidecar surface writes them;
`"service * *"` stands for the whole service. States are `CLOSED`, `OPEN`, `HALF_OPEN`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = [
    "STATES",
    "WHOLE_SERVICE",
    "BreakerStatus",
    "Counts",
    "EdgeStatus",
    "Link",
    "Rates",
    "Sidecar",
    "SidecarStatus",
    "Unavailability",
    "Update",
    "is_whole_service",
    "service_of",
]

WHOLE_SERVICE = "* *"
STATES = ("CLOSED", "OPEN", "HALF_OPEN")


def service_of(endpoint: str) -> str:
    """The service owning `endpoint` (`"payment POST /v1/charges"` -> `"payment"`)."""
    return endpoint.split(" ", 1)[0]


def is_whole_service(endpoint: str) -> bool:
    """True for `"service * *"`."""
    return endpoint.split(" ", 1)[-1] == WHOLE_SERVICE


@dataclass(frozen=True, slots=True)
class Link:
    """One link of a cause chain: an unavailable endpoint and why."""

    endpoint: str
    reason: str

    @property
    def service(self) -> str:
        """The service owning the endpoint."""
        return service_of(self.endpoint)

    @property
    def breaker_open(self) -> bool:
        """True when the reason is an open circuit (`circuit open` or `circuit_open`)."""
        return self.reason.lower().replace("_", " ").startswith("circuit open")


Chain = tuple[Link, ...]


@dataclass(frozen=True, slots=True)
class Unavailability:
    """An endpoint is unavailable because of `chain` (root first) until `expires_at` (unix s)."""

    chain: Chain
    expires_at: float


@dataclass(frozen=True, slots=True)
class Update:
    """An availability update heard on a live stream (Watch or Redis pub/sub)."""

    service: str
    endpoint: str
    available: bool
    chain: Chain
    expires_at: float
    version: int
    via: str  # "watch" | "redis"


@dataclass(frozen=True, slots=True)
class Counts:
    """Cumulative call counters of one breaker (or the inbound side)."""

    calls: int = 0  # calls that reached the upstream
    failures: int = 0  # of those, the ones that failed (5xx, timeout, reset, ...)
    rejected: int = 0  # calls refused without being made

    def minus(self, older: Counts) -> Counts | None:
        """The increase since `older`, or None when a counter went back (a restarted sidecar)."""
        delta = Counts(
            self.calls - older.calls, self.failures - older.failures, self.rejected - older.rejected
        )
        if min(delta.calls, delta.failures, delta.rejected) < 0:
            return None
        return delta


@dataclass(frozen=True, slots=True)
class BreakerStatus:
    """One breaker of a sidecar as its /status reports it."""

    upstream: str
    state: str
    retry_after: float = 0.0
    counts: Counts = field(default_factory=Counts)


@dataclass(frozen=True, slots=True)
class EdgeStatus:
    """A learned edge `caller -> callee` (endpoints)."""

    caller: str
    callee: str
    required: bool = True
    # `required`, `optional (marked)` or `optional (learned)`, with the evidence of survival
    optionality: str = "required"
    survived: float = 0.0
    failed_with: float = 0.0


@dataclass(frozen=True, slots=True)
class SidecarStatus:
    """One sidecar's /status, normalised."""

    service: str
    breakers: tuple[BreakerStatus, ...] = ()
    edges: tuple[EdgeStatus, ...] = ()
    unavailable: dict[str, Unavailability] = field(default_factory=dict)
    watch_address: str | None = None  # its gRPC listener, where Watch is served


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-second rates of one breaker between two /status reads."""

    calls: float = 0.0
    failures: float = 0.0
    rejected: float = 0.0

    def plus(self, other: Rates) -> Rates:
        """The sum (replicas of one service)."""
        return Rates(
            self.calls + other.calls, self.failures + other.failures, self.rejected + other.rejected
        )


@dataclass
class Sidecar:
    """One followed sidecar, as the dashboard knows it now."""

    admin_url: str
    service: str | None = None
    reachable: bool | None = None  # None until it was first asked
    asked: int = 0  # /status requests so far: the dashboard's cost on this sidecar
    error: str = "not asked yet"
    status: SidecarStatus | None = None
    asked_at: float = -math.inf  # monotonic time the last good /status was asked for
    stream: str = "none"  # none | connecting | open | lost
    unavailable: dict[str, Unavailability] = field(default_factory=dict)
    touched: dict[str, float] = field(default_factory=dict)  # endpoint -> stream update time
    inferred_open: dict[str, float] = field(default_factory=dict)  # upstream -> update time
    counts: dict[str, tuple[Counts, float]] = field(default_factory=dict)
    rates: dict[str, Rates] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The service name once known, else the admin URL."""
        return self.service or self.admin_url

"""Instance-aware availability: one service endpoint served by several replicas.

Every update names the instance (replica) whose sidecar saw it. A receiver keeps, for each
endpoint of another service, the last report of every instance with its deadline, and for each
service the instances known alive (their *presence*: an available update about `service * *`,
sent on Watch streams). The rules, pure and clock-free (callers pass `now`):

- an instance is **live** for an endpoint while its report about that endpoint, or its
  presence for the endpoint's service, has not expired;
- the endpoint is **unavailable** when at least `ceil(quorum * live)` live instances report it
  unavailable (quorum 1.0, the default: every live instance), and at least one does;
- otherwise it is available, **partially** when some live instance reports it unavailable;
  the available fraction is `(live - unavailable) / live` (1.0 when nothing is known).

An update without an instance (from a sender that predates instances) is the anonymous
instance "": a service whose sidecars all send that behaves exactly as one instance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from cascadebreaker.cascade.endpoints import Endpoint

if TYPE_CHECKING:
    from cascadebreaker.cascade.availability import Unavailability
    from cascadebreaker.cascade.updates import AvailabilityUpdate

__all__ = ["InstanceCount", "InstanceReports", "is_presence", "resolve_instance"]

MAX_INSTANCES = 256  # reports kept per endpoint (and presences per service)


def is_presence(update: AvailabilityUpdate) -> bool:
    """True for a presence: an available update about the whole sending service."""
    return update.available and update.endpoint == Endpoint.service_wide(update.service)


def resolve_instance(configured: str | None, env: dict[str, str], fallback: str) -> str:
    """The instance name: the configured one, else POD_NAME or HOSTNAME (what Kubernetes sets),
    else `fallback` (this sidecar's host:port)."""
    for value in (configured, env.get("POD_NAME"), env.get("HOSTNAME")):
        if value:
            return value
    return fallback


@dataclass(frozen=True, slots=True)
class InstanceCount:
    """How many live instances an endpoint has and how many of them report it unavailable."""

    live: int
    unavailable: int

    @property
    def fraction(self) -> float:
        """The available fraction of live instances (1.0 when none is known)."""
        if self.live == 0:
            return 1.0
        return (self.live - self.unavailable) / self.live

    @property
    def partial(self) -> bool:
        """Some, not all, live instances report the endpoint unavailable."""
        return 0 < self.unavailable < self.live


_NOTHING_KNOWN = InstanceCount(0, 0)


class _Report(NamedTuple):
    unavailability: Unavailability | None  # None: the instance reports the endpoint available
    deadline: float  # local monotonic seconds


class InstanceReports:
    """The reports of other services' instances, aggregated per endpoint by the quorum rule."""

    def __init__(self, quorum: float = 1.0, max_instances: int = MAX_INSTANCES) -> None:
        if not 0 < quorum <= 1:
            raise ValueError("quorum must be in (0, 1]")
        self.quorum = quorum
        self._max = max_instances
        self._reports: dict[Endpoint, dict[str, _Report]] = {}
        self._presence: dict[str, dict[str, float]] = {}  # service -> instance -> deadline
        self._endpoints: dict[str, set[Endpoint]] = {}  # service -> endpoints with reports

    def __len__(self) -> int:
        return sum(len(r) for r in self._reports.values())

    def record(
        self,
        update: AvailabilityUpdate,
        unavailability: Unavailability | None,
        deadline: float,
    ) -> tuple[Endpoint, ...]:
        """Keep one instance's (verified) report; return the endpoints to re-aggregate."""
        service, instance = update.service, update.instance
        if is_presence(update):
            _bounded_put(self._presence.setdefault(service, {}), instance, deadline, self._max)
            return tuple(self._endpoints.get(service, ()))
        reports = self._reports.setdefault(update.endpoint, {})
        if instance not in reports and len(reports) >= self._max:
            del reports[min(reports, key=lambda i: reports[i].deadline)]
        reports[instance] = _Report(unavailability, deadline)
        self._endpoints.setdefault(service, set()).add(update.endpoint)
        return (update.endpoint,)

    def aggregate(
        self, endpoint: Endpoint, now: float
    ) -> tuple[Unavailability | None, InstanceCount]:
        """The endpoint's unavailability by the quorum rule (None: available) and its count."""
        reports = self._reports.get(endpoint, {})
        presence = self._presence.get(endpoint.service, {})
        if not reports and not presence:
            return None, _NOTHING_KNOWN
        live: set[str] = set()
        down: list[Unavailability] = []
        for instance, report in reports.items():
            if report.deadline > now:
                live.add(instance)
                if report.unavailability is not None:
                    down.append(report.unavailability)
        for instance, deadline in presence.items():
            if deadline > now:
                live.add(instance)
        count = InstanceCount(len(live), len(down))
        if not down or len(down) < math.ceil(self.quorum * len(live) - 1e-9):
            return None, count
        # The latest deadline holds dependents longest; the shorter chain explains best.
        return max(down, key=lambda u: (u.deadline, -len(u.cause_chain))), count

    def count(self, endpoint: Endpoint, now: float) -> InstanceCount:
        """Live and unavailable instances of `endpoint` now."""
        return self.aggregate(endpoint, now)[1]

    def reported(self) -> Iterable[Endpoint]:
        """Every endpoint some instance has a report about."""
        return list(self._reports)

    def expire(self, now: float) -> set[Endpoint]:
        """Drop expired reports and presences; return the endpoints whose instances changed."""
        touched: set[Endpoint] = set()
        for endpoint, reports in list(self._reports.items()):
            gone = [i for i, r in reports.items() if r.deadline <= now]
            if not gone:
                continue
            for instance in gone:
                del reports[instance]
            touched.add(endpoint)
            if not reports:
                del self._reports[endpoint]
                known = self._endpoints.get(endpoint.service)
                if known is not None:
                    known.discard(endpoint)
                    if not known:
                        del self._endpoints[endpoint.service]
        for service, presences in list(self._presence.items()):
            gone = [i for i, d in presences.items() if d <= now]
            for instance in gone:
                del presences[instance]
            if gone:
                touched.update(self._endpoints.get(service, ()))
            if not presences:
                del self._presence[service]
        return touched

    def next_deadline(self) -> float | None:
        """The earliest deadline held (when some endpoint's instances next change)."""
        deadlines = [r.deadline for reports in self._reports.values() for r in reports.values()]
        deadlines.extend(d for p in self._presence.values() for d in p.values())
        return min(deadlines, default=None)


def _bounded_put(table: dict[str, float], key: str, deadline: float, limit: int) -> None:
    if key not in table and len(table) >= limit:
        del table[min(table, key=table.__getitem__)]  # forget the one expiring first
    table[key] = deadline

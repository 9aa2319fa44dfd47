"""What the page shows, derived from the followed sidecars: beliefs about endpoints, service
availability, breakers aggregated over replicas. Pure functions of the fleet's records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cascadebreaker.dashboard.model import (
    BreakerStatus,
    Counts,
    Rates,
    Sidecar,
    Unavailability,
    is_whole_service,
    service_of,
)

__all__ = ["Belief", "BreakerView", "availability", "beliefs", "breakers", "partial"]

_STATE_RANK = {"CLOSED": 0, "HALF_OPEN": 1, "OPEN": 2}


@dataclass(frozen=True, slots=True)
class Belief:
    """An endpoint believed unavailable: why, and by how many of its owner's replicas."""

    unavailability: Unavailability
    reporters: int = 1
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class BreakerView:
    """One caller's breaker for one upstream, over all replicas of the caller."""

    service: str
    upstream: str
    state: str
    retry_after: float
    rates: Rates | None
    totals: Counts
    instances: int
    open_instances: int
    inferred: bool  # OPEN read off an update, not yet confirmed by /status
    stale: bool  # every sidecar that reported it is unreachable now


def beliefs(
    sidecars: Iterable[Sidecar], heard: Mapping[str, Mapping[str, Unavailability]], wall: float
) -> dict[str, Belief]:
    """Every endpoint believed unavailable now.

    A service's own sidecars speak for its endpoints (unavailable when every reachable
    replica says so); anyone speaks for a whole service (a caller's open breaker) and for
    services no reachable sidecar of which is followed.
    """
    replicas: dict[str, int] = {}
    sidecars = list(sidecars)
    for sidecar in sidecars:
        if sidecar.reachable:
            replicas[sidecar.name] = replicas.get(sidecar.name, 0) + 1
    own: dict[str, list[Unavailability]] = {}
    others: dict[str, Unavailability] = {}
    reports: list[tuple[str, Mapping[str, Unavailability]]] = [
        (s.name, s.unavailable) for s in sidecars if s.reachable
    ]
    reports += list(heard.items())
    for reporter, table in reports:
        for endpoint, unavailability in table.items():
            if 0 < unavailability.expires_at <= wall:
                continue  # expired; a recovery may never be sent
            owner = service_of(endpoint)
            if owner == reporter and owner in replicas:
                own.setdefault(endpoint, []).append(unavailability)
            elif owner not in replicas or is_whole_service(endpoint):
                others.setdefault(endpoint, unavailability)
    found = {e: Belief(u) for e, u in others.items()}
    for endpoint, said in own.items():
        total = replicas[service_of(endpoint)]
        if len(said) == total:
            found[endpoint] = Belief(said[0], len(said), total)
    return found


def partial(sidecars: Iterable[Sidecar], wall: float) -> dict[str, tuple[int, int]]:
    """Endpoints some but not all replicas of their service call unavailable: (said, of)."""
    counts: dict[str, int] = {}
    replicas: dict[str, int] = {}
    for sidecar in sidecars:
        if not sidecar.reachable:
            continue
        replicas[sidecar.name] = replicas.get(sidecar.name, 0) + 1
        for endpoint, u in sidecar.unavailable.items():
            if service_of(endpoint) == sidecar.name and not 0 < u.expires_at <= wall:
                counts[endpoint] = counts.get(endpoint, 0) + 1
    return {
        e: (n, replicas[service_of(e)]) for e, n in counts.items() if n < replicas[service_of(e)]
    }


def availability(
    services: Iterable[str], sidecars: Iterable[Sidecar], beliefs: Mapping[str, Belief]
) -> dict[str, str]:
    """`available`, `unavailable` or `unreachable` for each of `services`."""
    down = {service_of(e) for e in beliefs}
    reachable: dict[str, bool] = {}
    for sidecar in sidecars:
        reachable[sidecar.name] = reachable.get(sidecar.name, False) or bool(sidecar.reachable)
    found = {}
    for service in services:
        if reachable.get(service) is False:
            found[service] = "unreachable"
        else:
            found[service] = "unavailable" if service in down else "available"
    return found


def breakers(sidecars: Iterable[Sidecar]) -> dict[tuple[str, str], BreakerView]:
    """Every (service, upstream) breaker, aggregated over the service's replicas."""
    groups: dict[tuple[str, str], list[tuple[Sidecar, BreakerStatus]]] = {}
    for sidecar in sidecars:
        if sidecar.status is None:
            continue
        for breaker in sidecar.status.breakers:
            groups.setdefault((sidecar.name, breaker.upstream), []).append((sidecar, breaker))
    found = {}
    for (service, upstream), members in groups.items():
        live = [(s, b) for s, b in members if s.reachable] or members
        states = ["OPEN" if upstream in s.inferred_open else b.state for s, b in live]
        state = max(states, key=_STATE_RANK.__getitem__)
        rates = [s.rates[upstream] for s, _ in live if upstream in s.rates]
        found[(service, upstream)] = BreakerView(
            service=service,
            upstream=upstream,
            state=state,
            retry_after=max(b.retry_after for _, b in live),
            rates=_sum(rates) if rates else None,
            totals=Counts(
                sum(b.counts.calls for _, b in live),
                sum(b.counts.failures for _, b in live),
                sum(b.counts.rejected for _, b in live),
            ),
            instances=len(live),
            open_instances=states.count("OPEN"),
            inferred=any(upstream in s.inferred_open for s, _ in live),
            stale=not any(s.reachable for s, _ in members),
        )
    return found


def _sum(rates: list[Rates]) -> Rates:
    total = Rates()
    for r in rates:
        total = total.plus(r)
    return total

"""The page's document: everything the browser draws, built from the fleet in one pass.

The browser receives the whole document on every change (Server-Sent Events); it is small (a
few kB per service) and a reconnecting page needs nothing else to catch up.
"""

from __future__ import annotations

from typing import Any

from cascadebreaker.dashboard.fleet import Fleet
from cascadebreaker.dashboard.model import (
    WHOLE_SERVICE,
    EdgeStatus,
    Link,
    is_whole_service,
    service_of,
)
from cascadebreaker.dashboard.views import Belief, BreakerView

__all__ = ["TIMELINE_SHOWN", "picture"]

TIMELINE_SHOWN = 120


def _chain(links: tuple[Link, ...]) -> list[dict[str, str]]:
    return [{"endpoint": c.endpoint, "service": c.service, "reason": c.reason} for c in links]


def _endpoint(fleet: Fleet, endpoint: str, belief: Belief | None, partial: Any) -> dict[str, Any]:
    said = partial.get(endpoint)
    return {
        "id": endpoint,
        "service": service_of(endpoint),
        "name": endpoint.split(" ", 1)[1],
        "available": belief is None,
        "causeChain": [] if belief is None else _chain(belief.unavailability.chain),
        "expiresAt": None if belief is None else belief.unavailability.expires_at or None,
        "replicas": None if said is None else {"unavailable": said[0], "of": said[1]},
        "updates": list(fleet.updates_of.get(endpoint, ())),
    }


def _breaker(view: BreakerView) -> dict[str, Any]:
    rates = view.rates
    error_percent = None
    if rates is not None and rates.calls > 0:
        error_percent = round(100.0 * rates.failures / rates.calls, 1)
    return {
        "service": view.service,
        "upstream": view.upstream,
        "state": view.state,
        "retryAfter": round(view.retry_after, 3),
        "rates": None
        if rates is None
        else {
            "calls": round(rates.calls, 2),
            "failures": round(rates.failures, 2),
            "rejected": round(rates.rejected, 2),
        },
        "errorPercent": error_percent,
        "totals": {
            "calls": view.totals.calls,
            "failures": view.totals.failures,
            "rejected": view.totals.rejected,
        },
        "instances": view.instances,
        "openInstances": view.open_instances,
        "inferred": view.inferred,
        "stale": view.stale,
    }


def picture(fleet: Fleet, wall: float) -> dict[str, Any]:
    """The page's document as of `wall` (unix seconds)."""
    beliefs = fleet.beliefs(wall)
    partial = fleet.partial(wall)
    availability = fleet.availability(wall, beliefs)
    services = []
    for name in fleet.services():
        whole = beliefs.get(f"{name} {WHOLE_SERVICE}")
        endpoints = sorted(
            e for e in fleet.endpoints if service_of(e) == name and not is_whole_service(e)
        )
        services.append(
            {
                "name": name,
                "availability": availability[name],
                "causeChain": [] if whole is None else _chain(whole.unavailability.chain),
                "sidecars": [
                    {
                        "adminUrl": s.admin_url,
                        "reachable": s.reachable,
                        "error": s.error,
                        "stream": s.stream,
                        "statusRequests": s.asked,
                    }
                    for s in fleet.sidecars_of(name)
                ],
                "endpoints": [_endpoint(fleet, e, beliefs.get(e), partial) for e in endpoints],
                "fault": fleet.faults.get(name),
            }
        )
    edges: dict[tuple[str, str], bool] = {}
    seen: dict[tuple[str, str], EdgeStatus] = {}  # the caller's sidecar speaks for its edge
    for sidecar in fleet.sidecars.values():
        for edge in sidecar.status.edges if sidecar.status is not None else ():
            key = (edge.caller, edge.callee)
            edges[key] = edges.get(key, False) or edge.required
            if key not in seen or edge.required:
                seen[key] = edge

    def reachable(endpoint: str) -> bool:
        whole = f"{service_of(endpoint)} {WHOLE_SERVICE}"
        return endpoint not in beliefs and whole not in beliefs

    breakers = fleet.breakers()
    return {
        "at": wall,
        "version": fleet.version,
        "services": services,
        "edges": [
            {
                "caller": c,
                "callee": d,
                "required": r,
                "optionality": seen[c, d].optionality if not r else "required",
                "evidence": {
                    "survived": seen[c, d].survived,
                    "failedWith": seen[c, d].failed_with,
                },
                "available": reachable(d),
            }
            for (c, d), r in sorted(edges.items())
        ],
        "breakers": [_breaker(breakers[key]) for key in sorted(breakers)],
        "faults": [{"service": s, "fault": f} for s, f in sorted(fleet.faults.items())],
        "timeline": list(fleet.timeline)[:TIMELINE_SHOWN],
        "redis": fleet.redis,
    }

"""A snapshot of the running demo: counters, breaker states, unavailable endpoints, faults."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx

from cascadebreaker.demo.topology import ServiceSpec, Topology

_CHAIN_KEYS = ("cause_chain", "causeChain", "cause", "causes")


@dataclass
class ServiceView:
    """What one service reports right now."""

    name: str
    up: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    breakers: dict[str, str] = field(default_factory=dict)  # upstream -> state
    unavailable: list[str] = field(default_factory=list)  # "endpoint <- cause chain"
    fault: str | None = None


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    try:
        response = await client.get(url, timeout=1.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _breaker_states(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    states = {}
    for name, value in raw.items():
        state = value.get("state") if isinstance(value, dict) else value
        states[str(name).split("->")[-1]] = str(state)
    return states


def _link(link: Any) -> str:
    return str(link.get("endpoint", link)) if isinstance(link, dict) else str(link)


def _chain_text(cause: Any) -> str:
    """A cause chain as one line, root first: `courier * * (circuit open) -> shipping POST ...`."""
    if isinstance(cause, str):
        return cause
    if not isinstance(cause, list):
        return ""
    links = []
    for i, link in enumerate(cause):
        if isinstance(link, dict):
            reason = link.get("reason") if i == 0 else None
            links.append(str(link.get("endpoint", link)) + (f" ({reason})" if reason else ""))
        else:
            links.append(str(link))
    return " -> ".join(links)


def _unavailable(status: Any) -> list[str]:
    """Unavailable endpoints from a sidecar's /status (`cascade.unavailable`), tolerant of shape."""
    if not isinstance(status, dict):
        return []
    raw = status.get("unavailable")
    if raw is None and isinstance(status.get("cascade"), dict):
        raw = status["cascade"].get("unavailable")
    if isinstance(raw, dict):
        raw = [{"endpoint": k, "cause_chain": v} for k, v in raw.items()]
    items: list[str] = []
    for entry in raw or ():
        if not isinstance(entry, dict):
            items.append(str(entry))
            continue
        cause = next((entry[k] for k in _CHAIN_KEYS if k in entry), None)
        if isinstance(cause, list) and len(cause) > 1 and _link(cause[-1]) == entry.get("endpoint"):
            cause = cause[:-1]  # the chain ends with the endpoint itself: say it once
        chain = _chain_text(cause)
        items.append(f"{entry.get('endpoint', '?')}" + (f": {chain}" if chain else ""))
    return items


async def observe_service(client: httpx.AsyncClient, spec: ServiceSpec) -> ServiceView:
    """Collect one service's view (its app's /_stats, its sidecar's /status, its fault)."""
    view = ServiceView(spec.name)
    stats = await _get_json(client, f"{spec.app_url}/_stats")
    if isinstance(stats, dict):
        view.up = True
        view.counts = dict(stats.get("counts", {}))
        view.breakers = _breaker_states(stats.get("breakers"))
    if spec.admin_url is not None:
        status = await _get_json(client, f"{spec.admin_url}/status")
        if isinstance(status, dict):
            view.breakers.update(_breaker_states(status.get("breakers")))
            view.unavailable = _unavailable(status)
    if spec.external and view.up:
        fault = await _get_json(client, f"{spec.app_url}/_fault")
        if isinstance(fault, dict) and isinstance(fault.get("fault"), dict):
            f = fault["fault"]
            view.fault = f"{f.get('mode')} rate={f.get('rate')}"
    return view


async def observe(topology: Topology, client: httpx.AsyncClient) -> dict[str, ServiceView]:
    """Views of every service, collected concurrently."""
    views = await asyncio.gather(
        *(observe_service(client, spec) for spec in topology.services.values())
    )
    return {v.name: v for v in views}


async def reset_stats(topology: Topology, client: httpx.AsyncClient) -> None:
    """Zero every service's counters (between experiment runs)."""
    await asyncio.gather(
        *(client.delete(f"{s.app_url}/_stats", timeout=2.0) for s in topology.services.values())
    )


def total(views: dict[str, ServiceView], service: str, counter: str) -> int:
    """One counter of one service, summed over its replicas (0 when absent)."""
    return sum(
        int(view.counts.get(counter, 0))
        for name, view in views.items()
        if name == service or name.startswith(service + ".")
    )

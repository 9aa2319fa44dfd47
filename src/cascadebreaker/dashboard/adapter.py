"""The one place that reads the sidecars' spellings: /status JSON, Watch messages, Redis messages.

Sidecar surfaces are converging on one vocabulary (`CLOSED|OPEN|HALF_OPEN`, camelCase keys,
`causeChain`, `retryAfter`); older sidecars say `open`, `cause_chain`, `retry_after`. Every
reader here accepts both, so the rest of the dashboard sees only `model` types. A document that
cannot be read raises `Unreadable` naming what was wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cascadebreaker.dashboard.model import (
    STATES,
    WHOLE_SERVICE,
    BreakerStatus,
    Chain,
    Counts,
    EdgeStatus,
    Link,
    SidecarStatus,
    Unavailability,
    Update,
)

__all__ = [
    "Unreadable",
    "counts_of",
    "state_name",
    "status_from_json",
    "update_from_json",
    "update_from_proto",
    "update_from_redis",
]

# Outcome counters that are not a call reaching the upstream, or not a failure of it.
_NOT_CALLS = frozenset({"rejected", "cancelled", "canceled"})
_SUCCESS = frozenset({"success", "successes", "ok"})
_PROTO_STATES = {1: "CLOSED", 2: "OPEN", 3: "HALF_OPEN"}


class Unreadable(ValueError):
    """A sidecar answered something the dashboard cannot read."""


def _pick(data: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    """The first of `names` present in `data` (snake_case and camelCase spellings)."""
    for name in names:
        if name in data:
            return data[name]
    return default


def state_name(raw: object) -> str:
    """`open`, `OPEN`, `CIRCUIT_STATE_OPEN`, `half-open`, 2 -> `OPEN` (etc.); Unreadable else."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw in _PROTO_STATES:
            return _PROTO_STATES[raw]
    elif isinstance(raw, str):
        name = raw.strip().upper().replace("-", "_").removeprefix("CIRCUIT_STATE_")
        name = "HALF_OPEN" if name == "HALFOPEN" else name
        if name in STATES:
            return name
    raise Unreadable(f"unknown breaker state {raw!r}")


def _endpoint(raw: object, service: str = "") -> str:
    """`"svc METHOD /route"`; a bare `"METHOD /route"` gets `service` in front (proto form)."""
    if not isinstance(raw, str) or not raw.strip():
        raise Unreadable(f"endpoint must be a non-empty string, got {raw!r}")
    parts = raw.split()
    if len(parts) == 2 and service:
        parts = [service, *parts]
    if len(parts) != 3:
        raise Unreadable(f"endpoint must be 'service METHOD /route', got {raw!r}")
    return " ".join(parts)


def _chain(raw: object) -> Chain:
    """A cause chain, root first, from a list of `{endpoint, reason}` (or `{service, ...}`)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise Unreadable("cause chain must be a list")
    links = []
    for item in raw:
        if isinstance(item, str):
            links.append(Link(_endpoint(item), ""))
        elif isinstance(item, Mapping):
            endpoint = _endpoint(item.get("endpoint"), str(item.get("service") or ""))
            links.append(Link(endpoint, str(item.get("reason", ""))))
        else:
            raise Unreadable("cause chain links must be objects")
    return tuple(links)


def counts_of(outcomes: object) -> Counts:
    """Calls, failures and rejections from a sidecar's outcome counters."""
    if not isinstance(outcomes, Mapping):
        return Counts()
    calls = failures = rejected = 0
    for name, value in outcomes.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        key = str(name).lower()
        if key == "rejected":
            rejected += int(value)
        elif key not in _NOT_CALLS:
            calls += int(value)
            if key not in _SUCCESS:
                failures += int(value)
    return Counts(calls, failures, rejected)


def _breakers(raw: object) -> tuple[BreakerStatus, ...]:
    """Breakers as a mapping `{upstream: {...}}` or a list of objects naming their upstream."""
    if isinstance(raw, Mapping):
        items = [(str(name), value) for name, value in raw.items()]
    elif isinstance(raw, list):
        items = [(str(_pick(v, "upstream", "name", default="?")), v) for v in raw]
    elif raw is None:
        items = []
    else:
        raise Unreadable("breakers must be an object or a list")
    found = []
    for name, value in items:
        if not isinstance(value, Mapping):
            raise Unreadable(f"breaker {name!r} must be an object")
        upstream = name.split("->")[-1].strip()
        retry_after = _pick(value, "retryAfter", "retry_after", default=0.0)
        found.append(
            BreakerStatus(
                upstream,
                state_name(value.get("state")),
                float(retry_after or 0.0),
                counts_of(_pick(value, "calls", "outcomes", "counts")),
            )
        )
    return tuple(found)


def _unavailable(raw: object) -> dict[str, Unavailability]:
    if isinstance(raw, Mapping):  # {endpoint: chain}
        raw = [{"endpoint": k, "causeChain": v} for k, v in raw.items()]
    if raw is not None and not isinstance(raw, list):
        raise Unreadable("unavailable must be a list")
    found: dict[str, Unavailability] = {}
    for entry in raw or ():
        if not isinstance(entry, Mapping):
            raise Unreadable("unavailable entries must be objects")
        endpoint = _endpoint(entry.get("endpoint"))
        chain = _chain(_pick(entry, "causeChain", "cause_chain"))
        expires = _pick(entry, "expiresAt", "expires_at")
        found[endpoint] = Unavailability(chain, float(expires) if expires is not None else 0.0)
    return found


def _edges(raw: object) -> tuple[EdgeStatus, ...]:
    if raw is not None and not isinstance(raw, list):
        raise Unreadable("edges must be a list")
    edges = []
    for entry in raw or ():
        if not isinstance(entry, Mapping):
            raise Unreadable("edges must be objects")
        required = bool(entry.get("required", True))
        optionality = entry.get("optionality")
        evidence = entry.get("evidence")
        evidence = evidence if isinstance(evidence, Mapping) else {}
        edges.append(
            EdgeStatus(
                _endpoint(entry.get("caller")),
                _endpoint(entry.get("callee")),
                required,
                optionality
                if isinstance(optionality, str)
                else ("required" if required else "optional (marked)"),
                _count(evidence.get("survived")),
                _count(evidence.get("failedWith")),
            )
        )
    return tuple(edges)


def _count(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _watch_address(doc: Mapping[str, Any], cascade: Mapping[str, Any]) -> str | None:
    address = cascade.get("advertise")
    if not address and isinstance(doc.get("listen"), Mapping):
        address = doc["listen"].get("grpc")
    if not isinstance(address, str) or not address:
        return None
    host = address.rpartition(":")[0].strip("[]")
    return None if host in ("", "0.0.0.0", "::") else address


def status_from_json(doc: object) -> SidecarStatus:
    """A sidecar's /status document, normalised."""
    if not isinstance(doc, Mapping):
        raise Unreadable("/status must be a JSON object")
    service = doc.get("service")
    if not isinstance(service, str) or not service:
        raise Unreadable("/status has no service name")
    cascade = doc.get("cascade")
    cascade = cascade if isinstance(cascade, Mapping) else {}
    try:
        return SidecarStatus(
            service=service,
            breakers=_breakers(doc.get("breakers")),
            edges=_edges(cascade.get("edges")),
            unavailable=_unavailable(_pick(cascade, "unavailable", default=None)),
            watch_address=_watch_address(doc, cascade),
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, Unreadable):
            raise
        raise Unreadable(f"/status: {exc}") from exc


def update_from_json(data: object, via: str) -> Update:
    """An update's JSON wire form (both key spellings)."""
    if not isinstance(data, Mapping):
        raise Unreadable("an update must be a JSON object")
    service = data.get("service")
    if not isinstance(service, str) or not service:
        raise Unreadable("an update must name its service")
    try:
        return Update(
            service=service,
            endpoint=_endpoint(data.get("endpoint"), service),
            available=bool(data.get("available")),
            chain=_chain(_pick(data, "causeChain", "cause_chain")),
            expires_at=float(_pick(data, "expiresAt", "expires_at", default=0.0) or 0.0),
            version=int(data.get("version") or 0),
            via=via,
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, Unreadable):
            raise
        raise Unreadable(f"update: {exc}") from exc


def update_from_redis(message: bytes) -> Update:
    """A Redis pub/sub message: `<sender id>|<update JSON>` (the sender id is the publisher's)."""
    _sender, sep, payload = message.partition(b"|")
    if not sep:
        raise Unreadable("a Redis update message is '<sender>|<json>'")
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Unreadable(f"a Redis update is not JSON: {exc}") from exc
    return update_from_json(data, "redis")


def update_from_proto(message: Any) -> Update:
    """A `ccb.v1.AvailabilityUpdate` message from a Watch stream."""
    service = str(message.service)
    if not service:
        raise Unreadable("an update must name its service")
    chain = tuple(
        Link(_endpoint(cause.endpoint, cause.service or service), cause.reason)
        for cause in message.cause_chain
    )
    return Update(
        service=service,
        endpoint=_endpoint(message.endpoint or WHOLE_SERVICE, service),
        available=bool(message.available),
        chain=chain,
        expires_at=message.expires_at_unix_ms / 1000,
        version=int(message.version),
        via="watch",
    )

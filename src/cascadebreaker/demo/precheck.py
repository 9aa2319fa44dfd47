"""Pre-checks an orchestrator runs before starting a saga: may this work proceed at all?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import httpx


@dataclass(frozen=True)
class Availability:
    """The answer of a pre-check: available or not, and the cause chain (root first)."""

    available: bool
    cause: tuple[str, ...] = ()


AVAILABLE = Availability(True)


class AvailabilityCheck(Protocol):
    """Asks whether one of this service's endpoints can do its work now."""

    async def check(self, endpoint: str) -> Availability:
        """Availability of `endpoint` ("METHOD /route/template") of this service."""
        ...


class NoPrecheck:
    """The no-op check: everything is available (direct and plain modes)."""

    async def check(self, endpoint: str) -> Availability:
        """Always available."""
        return AVAILABLE


class SidecarPrecheck:
    """Asks the service's sidecar (`GET /availability?endpoint=...` on its admin port).

    Fails open: a sidecar without the endpoint (404, before the cascade exists) turns the check
    off for good; an unreachable or confused sidecar means "available" for this call, since the
    sidecar itself still enforces breakers on the calls the saga makes.
    """

    def __init__(self, client: httpx.AsyncClient, admin_url: str, timeout: float = 0.5) -> None:
        self._client = client
        self._admin_url = admin_url
        self._timeout = timeout
        self.supported = True

    async def check(self, endpoint: str) -> Availability:
        """Availability of `endpoint` as the sidecar knows it."""
        if not self.supported:
            return AVAILABLE
        try:
            response = await self._client.get(
                f"{self._admin_url}/availability",
                params={"endpoint": endpoint},
                timeout=self._timeout,
            )
        except httpx.HTTPError:
            return AVAILABLE
        if response.status_code in (404, 405, 501):
            self.supported = False
            return AVAILABLE
        try:
            body = response.json()
        except ValueError:
            return AVAILABLE
        return parse_availability(body)


def parse_availability(body: Any) -> Availability:
    """Read an availability answer: `{"available": bool, "causeChain": [...]}` (tolerant)."""
    if not isinstance(body, dict) or not isinstance(body.get("available"), bool):
        return AVAILABLE
    raw = next((body[k] for k in ("causeChain", "cause_chain", "cause", "causes") if k in body), ())
    if isinstance(raw, str):
        raw = [raw]
    cause = tuple(str(c.get("endpoint", c) if isinstance(c, dict) else c) for c in (raw or ()))
    return Availability(body["available"], cause)

"""The plug points the sidecar offers, as Protocols: what a plug-in (the cascade) sees of it,
and the views the gRPC API reads when one is plugged in.

A plug-in gets a `PluginHost` (the runtime) and uses only what is named here and in hooks.py;
it never imports the proxy's machinery. The composition root (`sidecar/server.py`) wires it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cascadebreaker.sidecar.proxy.hooks import HookChain, RouteResolver

if TYPE_CHECKING:
    from cascadebreaker import CircuitBreaker
    from cascadebreaker.cascade.endpoints import Endpoint
    from cascadebreaker.cascade.updates import AvailabilityUpdate, CauseChain
    from cascadebreaker.sidecar.config import SidecarConfig
    from cascadebreaker.sidecar.proxy.endpoint_breakers import EndpointBreakers
    from cascadebreaker.sidecar.upstream.model import UpstreamTarget

__all__ = [
    "AdminRoute",
    "AvailabilityView",
    "EdgesTo",
    "InstanceShare",
    "Plugin",
    "PluginHost",
    "RefusalTrust",
    "RoutePort",
    "Unavailable",
    "UpdateSource",
    "WatchEnded",
    "WatchSubscription",
    "no_updates",
]

AdminRoute = Callable[[str], tuple[int, dict[str, Any]]]
"""An extra admin endpoint: query string -> (status, JSON body)."""


class Unavailable(Protocol):
    """Why an endpoint is unavailable (the cascade's `Unavailability`)."""

    @property
    def cause_chain(self) -> CauseChain:
        """Root first."""
        ...

    @property
    def expires_at(self) -> float:
        """Unix wall seconds."""
        ...


class InstanceShare(Protocol):
    """How many live instances serve an endpoint and the fraction that can (`InstanceCount`)."""

    @property
    def live(self) -> int:
        """Live instances known (0: nothing known)."""
        ...

    @property
    def fraction(self) -> float:
        """Available fraction of the live instances (1.0 when none is known)."""
        ...


class AvailabilityView(Protocol):
    """The cascade's view of target endpoints (`AvailabilityTable` fits)."""

    def check(self, endpoint: Endpoint) -> Unavailable | None:
        """None when `endpoint` is available now."""
        ...

    def instances(self, endpoint: Endpoint) -> InstanceShare:
        """The live instances of `endpoint` and the available fraction of them."""
        ...


@dataclass(frozen=True, slots=True)
class WatchSubscription:
    """One `Watch` call: who subscribes, which endpoints (empty = all), from which version."""

    subscriber_service: str
    endpoints: tuple[str, ...]
    since_version: int
    peer: str


UpdateSource = Callable[[WatchSubscription], AsyncIterator["AvailabilityUpdate"]]
"""Yields the updates for one subscriber until it cancels (the cascade implements this); raises
`WatchEnded` when the serving side ends the stream (shutdown, a subscriber too far behind)."""


class WatchEnded(Exception):
    """The serving side ended a Watch stream; the subscriber should reconnect with
    `since_version` = the last version it received (the message says why)."""


async def no_updates(subscription: WatchSubscription) -> AsyncIterator[AvailabilityUpdate]:
    """The default update source: nothing ever changes; the stream stays open until cancelled."""
    await asyncio.Event().wait()
    return
    yield  # pragma: no cover - makes this an async generator


class RoutePort(Protocol):
    """One upstream as a plug-in sees it: where it lives and its breaker."""

    @property
    def target(self) -> UpstreamTarget:
        """Host, port, base path."""
        ...

    @property
    def breaker(self) -> CircuitBreaker | None:
        """None for the inbound app route."""
        ...

    @property
    def endpoints(self) -> EndpointBreakers | None:
        """The per-endpoint breakers (`breaker.scope: endpoint`), else None."""
        ...


EdgesTo = Callable[["Endpoint"], list[dict[str, Any]]]
"""A target endpoint -> our learned edges to it, with their optionality and evidence (the
cascade's; `Check` and `/availability` show them)."""

RefusalTrust = Callable[[RoutePort, object, bytes], bool]
"""(route, what the hooks keep about the call: `RequestInfo.state` or the `SettledCall`, the
`ccb-refusal` value) -> honour it (refusals.py)."""


class Plugin(Protocol):
    """Something wired into the runtime that holds tasks or connections."""

    def drain(self) -> None:
        """The sidecar is shutting down: end streams that never end on their own."""

    def close(self) -> None:
        """Stop every task and connection."""


class PluginHost(Protocol):
    """What the sidecar's runtime offers a plug-in."""

    service: str
    config: SidecarConfig
    loop: asyncio.AbstractEventLoop
    hooks: HookChain
    route_resolver: RouteResolver
    admin_routes: dict[str, AdminRoute]
    status_sections: dict[str, Callable[[], Any]]
    collectors: list[Any]
    availability: AvailabilityView | None
    update_source: UpdateSource | None
    edges_to: EdgesTo | None
    plugins: dict[str, Plugin]
    refusal_key: bytes  # seals the refusals this process gives its own app (refusals.py)
    refusal_trust: RefusalTrust

    @property
    def routes(self) -> Mapping[str, RoutePort]:
        """The configured upstreams by name."""
        ...

"""The sidecar's shared state: routes with their pools and breakers, hooks, the call pipeline,
and the plug points (ports.py) the composition root wires plug-ins into."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from cascadebreaker import CircuitBreaker, MemoryStore, State
from cascadebreaker.contract import CIRCUIT_STATE, RETRY_AFTER, json_seconds
from cascadebreaker.sidecar.config import QuorumConfig, SidecarConfig, UpstreamConfig
from cascadebreaker.sidecar.http.wire import RawHeaders
from cascadebreaker.sidecar.proxy.call import call_raw, call_upstream
from cascadebreaker.sidecar.proxy.endpoint_breakers import EndpointBreakers
from cascadebreaker.sidecar.proxy.errors import UnknownUpstream
from cascadebreaker.sidecar.proxy.hooks import HookChain, RouteResolver, default_route_resolver
from cascadebreaker.sidecar.proxy.pipeline import CallPipeline
from cascadebreaker.sidecar.proxy.ports import (
    AdminRoute,
    AvailabilityView,
    EdgesTo,
    Plugin,
    RefusalTrust,
    UpdateSource,
)
from cascadebreaker.sidecar.proxy.refusals import loopback_trust
from cascadebreaker.sidecar.proxy.routes import Route
from cascadebreaker.sidecar.upstream.client import HeadersArg, RawResponse, UpstreamClient
from cascadebreaker.sidecar.upstream.model import UpstreamResponse, UpstreamTarget
from cascadebreaker.sidecar.upstream.pool import UpstreamPool
from cascadebreaker.stores.base import Store

__all__ = ["SidecarRuntime", "build_store"]


def build_store(url: str, namespace: str, quorum: QuorumConfig | None = None) -> Store:
    """The breaker store named by `store:` in the config (the library's store port)."""
    if url == "memory":
        return MemoryStore()
    from cascadebreaker.stores.redis import RedisStore  # needs the redis extra

    fleet = None if quorum is None else quorum.spec()
    return RedisStore.from_url(url, namespace=namespace, quorum=fleet)


def _target(name: str, config: UpstreamConfig, url: str | None = None) -> UpstreamTarget:
    return UpstreamTarget.from_url(
        name,
        url or config.url,
        timeout=config.timeout,
        connect_timeout=config.connect_timeout,
        max_idle=config.max_idle_connections,
        host_header=config.host_header,
    )


_MAX_INBOUND_LINES: Final = 4096  # caller addresses whose header lines are kept


class SidecarRuntime:
    """Everything the listeners share. Build it inside the running event loop."""

    def __init__(
        self,
        config: SidecarConfig,
        loop: asyncio.AbstractEventLoop | None = None,
        store: Store | None = None,
    ) -> None:
        self.config = config
        self.service = config.service
        self.via = b"1.1 " + config.service.encode()
        self.via_line = b"via: " + self.via + b"\r\n"  # the header line, made once
        # Per caller address: `x-forwarded-for` and `via`, ready for requests to the app.
        self._inbound_lines: dict[str, bytes] = {}
        self.loop = loop or asyncio.get_running_loop()
        self.store: Store = (
            store if store is not None else build_store(config.store, config.service, config.quorum)
        )
        self.client = UpstreamClient(
            (_target(name, up) for name, up in config.upstreams.items()), self.loop
        )
        self.routes: dict[str, Route] = {}
        for name, up in config.upstreams.items():
            breaker = self._breaker(name, up)
            more = tuple(UpstreamPool(_target(name, up, u), self.loop) for u in up.urls[1:])
            route = self.routes[name] = Route.from_config(
                name, up, self.client.pool(name), breaker, more
            )
            route.shared_store = config.store != "memory"
            if up.breaker.scope == "endpoint":
                route.endpoints = EndpointBreakers(
                    name,
                    functools.partial(self._breaker, config=up),
                    lambda: self.route_resolver,
                    breaker,
                    up.breaker.max_endpoints,
                )
        self.routes_by_host = {name.lower().encode(): route for name, route in self.routes.items()}
        self.app_route: Route | None = None
        app = config.app_upstream
        if app is not None:
            pool = UpstreamPool(_target(config.service, app), self.loop)
            self.app_route = Route.from_config(config.service, app, pool, None)
        self.hooks = HookChain()
        self.route_resolver: RouteResolver = default_route_resolver
        # Extra admin endpoints by path (e.g. the cascade's "/availability").
        self.admin_routes: dict[str, AdminRoute] = {}
        # Extra /status sections and Prometheus collectors (the cascade adds its own).
        self.status_sections: dict[str, Callable[[], Any]] = {}
        self.collectors: list[Any] = []
        # Views the gRPC API reads (Check, Watch) when a plug-in provides them.
        self.availability: AvailabilityView | None = None
        self.update_source: UpdateSource | None = None
        self.edges_to: EdgesTo | None = None
        self.plugins: dict[str, Plugin] = {}  # by name, e.g. "cascade"; closed with the runtime
        # Our refusals to our own app are sealed with a key of this process; which upstream
        # refusals are honoured (not failures) is the cascade's to decide when it has a secret.
        self.refusal_key = os.urandom(32)
        self.refusal_trust: RefusalTrust = loopback_trust
        self.pipeline = CallPipeline(self)
        self.started_at = time.time()
        self.ready = False

    def inbound_lines(self, client: str) -> bytes:
        """`x-forwarded-for: <client>` and `via`, ready header lines for a request forwarded
        to the app: made once per caller address (a connection's requests share its string),
        at most 4,096 remembered."""
        lines = self._inbound_lines.get(client)
        if lines is None:
            if len(self._inbound_lines) >= _MAX_INBOUND_LINES:
                self._inbound_lines.clear()
            lines = b"x-forwarded-for: " + client.encode() + b"\r\n" + self.via_line
            self._inbound_lines[client] = lines
        return lines

    def _breaker(self, name: str, config: UpstreamConfig) -> CircuitBreaker:
        settings = config.breaker
        return CircuitBreaker(
            name,
            recovery_timeout=settings.recovery_timeout,
            half_open_max_calls=settings.half_open_max_calls,
            policy=settings.policies(),
            probe_timeout=settings.probe_timeout,
            half_open_failure_rate=settings.half_open_failure_rate,
            store=self.store,
        )

    def store_connected(self) -> bool:
        """Whether the breaker store has reached its server once (a memory store: always).

        Only the start is judged: a later outage degrades to local state, and taking every
        replica out of service for it would defeat that."""
        reached = getattr(self.store, "wait_ready", None)  # RedisStore: its subscriber listens
        return reached is None or bool(reached(0))

    def breaker(self, upstream: str) -> CircuitBreaker:
        """The breaker of an upstream (UnknownUpstream when not configured)."""
        route = self.routes.get(upstream)
        if route is None or route.breaker is None:
            raise UnknownUpstream(upstream)
        return route.breaker

    def check(self, upstream: str) -> dict[str, Any]:
        """Whether `upstream` would be called now: {upstream, callable, circuitState,
        retryAfter}."""
        breaker = self.breaker(upstream)
        state = breaker.state
        return {
            "upstream": upstream,
            "callable": state is not State.OPEN,
            CIRCUIT_STATE: state.value,
            RETRY_AFTER: json_seconds(breaker.retry_after),
        }

    async def call(
        self,
        upstream: str,
        method: str,
        path: str,
        headers: HeadersArg = (),
        body: bytes = b"",
        timeout: float | None = None,  # noqa: ASYNC109 - per read
    ) -> UpstreamResponse:
        """One REST call through the pipeline, as the outbound listener makes it: hooks,
        breaker, pool, classification, replay, retries within the budget, stats.

        Raises UnknownUpstream, CallRejected (open circuit / hook; `.rejection` has the facts) or
        an UpstreamError subclass (connect 502, timeout 504, reset, protocol); a 5xx response is
        returned, not raised (it is recorded as a failure).
        """
        return await call_upstream(self, upstream, method, path, headers, body, timeout)

    def call_raw(
        self,
        upstream: str,
        method: bytes,
        path: bytes,
        headers: RawHeaders,
        body: bytes = b"",
        timeout: float | None = None,
    ) -> Coroutine[Any, Any, RawResponse]:
        """`call` as the wire has it (the gRPC `Call` uses it): `headers` end-to-end only
        (`forwardable`), the response's headers raw, as the hooks left them.

        A plain method handing out the driver's coroutine: no second coroutine frame for
        every resumption of the call to pass through."""
        return call_raw(self, upstream, method, path, headers, body, timeout)

    def status(self) -> dict[str, Any]:
        """The /status document."""
        breakers: dict[str, Any] = {}
        for name, route in self.routes.items():
            assert route.breaker is not None
            # The library's snapshot (state as the contract names it, retryAfter in seconds)
            snapshot = route.breaker.snapshot().to_dict()
            snapshot["calls"] = route.stats.snapshot()
            snapshot["connections"] = {"open": route.pool.open_count, "idle": route.pool.idle_count}
            if route.endpoints is not None:
                snapshot["endpoints"] = {
                    endpoint: {
                        "state": breaker.state.value,
                        RETRY_AFTER: json_seconds(breaker.retry_after),
                    }
                    for endpoint, breaker in route.endpoints.items()
                }
            breakers[name] = snapshot
        inbound = self.app_route.stats.snapshot() if self.app_route is not None else None
        return {
            "service": self.service,
            "uptime": round(time.time() - self.started_at, 3),
            "store": "memory" if self.config.store == "memory" else "redis",
            "breakers": breakers,
            "inbound": inbound,
            **{name: section() for name, section in self.status_sections.items()},
        }

    def close(self) -> None:
        """Close every upstream connection."""
        for plugin in self.plugins.values():
            plugin.close()
        self.client.close()
        for route in self.routes.values():
            for pool in route.pools[1:]:  # the client closed each route's first pool
                pool.close()
        if self.app_route is not None:
            self.app_route.pool.close()
        self.store.close()  # flushes queued outcomes of a shared store

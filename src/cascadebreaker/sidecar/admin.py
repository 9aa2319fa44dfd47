"""Admin listener: /healthz, /readyz, /status (JSON) and /metrics (Prometheus).

prometheus_client (~10 MB of memory with what it imports) is loaded at the first scrape: a
sidecar nobody scrapes never pays for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate
from typing import TYPE_CHECKING, cast

from cascadebreaker.sidecar.http.connection import ServerConnection
from cascadebreaker.sidecar.http.exchange import Exchange, RequestHead
from cascadebreaker.sidecar.http.limits import ConnectionTracker
from cascadebreaker.sidecar.http.wire import error_response, json_response, simple_response
from cascadebreaker.sidecar.proxy.replies import FixedExchange
from cascadebreaker.sidecar.proxy.routes import Route
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime
from cascadebreaker.sidecar.proxy.stats import LATENCY_BOUNDS

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric
    from prometheus_client.registry import Collector

_STATES = ("closed", "open", "half_open")
_PROMETHEUS_TEXT = b"text/plain; version=0.0.4; charset=utf-8"


class SidecarCollector:
    """Reads the sidecar's plain counters at scrape time (nothing Prometheus on the hot path).

    A prometheus_client `Collector` by shape (its base class would load the library early)."""

    def __init__(self, runtime: SidecarRuntime, tracker: ConnectionTracker) -> None:
        self.runtime = runtime
        self.tracker = tracker

    def _routes(self) -> Iterator[tuple[str, str, Route]]:
        for name, route in self.runtime.routes.items():
            yield "outbound", name, route
        if self.runtime.app_route is not None:
            yield "inbound", self.runtime.service, self.runtime.app_route

    def collect(self) -> Iterator[Metric]:
        """Calls by outcome, breaker states, rejections, latency, connections."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        calls = CounterMetricFamily(
            "ccb_sidecar_calls",
            "Proxied calls by outcome",
            labels=["direction", "upstream", "outcome"],
        )
        rejections = CounterMetricFamily(
            "ccb_sidecar_rejections",
            "Calls refused before reaching the upstream",
            labels=["direction", "upstream"],
        )
        latency = HistogramMetricFamily(
            "ccb_sidecar_call_duration_seconds",
            "Time until the last response byte",
            labels=["direction", "upstream"],
        )
        pool = GaugeMetricFamily(
            "ccb_sidecar_upstream_connections",
            "Connections to the upstream",
            labels=["upstream", "state"],
        )
        for direction, name, route in self._routes():
            stats = route.stats
            for outcome, count in stats.outcomes.items():
                calls.add_metric([direction, name, outcome], count)
            rejections.add_metric([direction, name], stats.outcomes["rejected"])
            cumulative = list(accumulate(stats.latency_buckets))
            buckets = [
                (f"{bound:g}", count)
                for bound, count in zip(LATENCY_BOUNDS, cumulative, strict=False)
            ]
            buckets.append(("+Inf", cumulative[-1]))
            latency.add_metric([direction, name], buckets, stats.latency_sum)
            pool.add_metric([name, "open"], route.pool.open_count)
            pool.add_metric([name, "idle"], route.pool.idle_count)
        state = GaugeMetricFamily(
            "ccb_sidecar_breaker_state",
            "1 for the breaker's current state",
            labels=["upstream", "state"],
        )
        for name, route in self.runtime.routes.items():
            if route.breaker is None:
                continue
            current = route.breaker.state.value.lower()
            for candidate in _STATES:
                state.add_metric([name, candidate], 1.0 if candidate == current else 0.0)
        tracker = self.tracker
        clients = GaugeMetricFamily(
            "ccb_sidecar_client_connections",
            "Open client connections (outbound and inbound listeners)",
        )
        clients.add_metric([], len(tracker.connections))
        most = GaugeMetricFamily(
            "ccb_sidecar_client_connections_max",
            "Client connections allowed before new ones get a 503 (limits.max_connections)",
        )
        if tracker.max_connections is not None:
            most.add_metric([], tracker.max_connections)
        refused = CounterMetricFamily(
            "ccb_sidecar_client_connections_refused",
            "Client connections refused with a 503 because the cap was reached",
        )
        refused.add_metric([], tracker.refused)
        yield from (calls, rejections, latency, state, pool, clients, most, refused)


class AdminHandler:
    """A tiny router for the admin endpoints."""

    def __init__(self, runtime: SidecarRuntime, tracker: ConnectionTracker) -> None:
        self.runtime = runtime
        self.tracker = tracker
        self._registry: CollectorRegistry | None = None

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry, made at the first scrape."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry, ProcessCollector

            registry = CollectorRegistry(auto_describe=False)
            registry.register(cast("Collector", SidecarCollector(self.runtime, self.tracker)))
            registry.register(ProcessCollector(registry=None))
            for collector in self.runtime.collectors:
                registry.register(collector)
            self._registry = registry
        return self._registry

    def handle(self, conn: ServerConnection, request: RequestHead) -> Exchange:
        """Answer one admin request."""
        path, _, query = request.target.partition(b"?")
        extra = self.runtime.admin_routes.get(path.decode("latin-1"))
        if extra is not None and request.method == b"GET":
            status, payload = extra(query.decode("latin-1"))
            reply = json_response(status, payload)
        elif request.method not in (b"GET", b"HEAD"):
            reply = error_response(405, "method not allowed")
        elif path == b"/healthz":
            reply = json_response(200, {"status": "ok"})
        elif path == b"/readyz":
            runtime = self.runtime
            store = runtime.store_connected()
            ready = runtime.ready and not self.tracker.draining
            ready = ready and (store or runtime.config.store_optional)
            answer = {"status": "ready" if ready else "not ready"}
            answer["store"] = "connected" if store else "unreachable"
            reply = json_response(200 if ready else 503, answer)
        elif path == b"/status":
            reply = json_response(200, self.runtime.status())
        elif path == b"/metrics":
            from prometheus_client import generate_latest

            reply = simple_response(200, generate_latest(self.registry), _PROMETHEUS_TEXT)
        else:
            reply = error_response(404, "not found", path=path.decode("latin-1"))
        if request.method == b"HEAD":
            reply = reply.partition(b"\r\n\r\n")[0] + b"\r\n\r\n"  # the head alone
        return FixedExchange(conn, request, lambda close: _with_close(reply, close))


def _with_close(reply: bytes, close: bool) -> bytes:
    if not close:
        return reply
    head, _, body = reply.partition(b"\r\n\r\n")
    return head + b"\r\nconnection: close\r\n\r\n" + body

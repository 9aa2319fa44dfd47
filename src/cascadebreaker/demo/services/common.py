"""What every demo service shares: work counters, trace propagation, calls to downstreams."""

from __future__ import annotations

import contextvars
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from cascadebreaker.cascade.trust import SERVING_ENDPOINT_HEADER
from cascadebreaker.demo.precheck import AvailabilityCheck, NoPrecheck, SidecarPrecheck
from cascadebreaker.demo.refusal import is_refusal
from cascadebreaker.demo.topology import Mode, Topology

if TYPE_CHECKING:
    from cascadebreaker import CircuitBreaker

# The W3C trace context of the request being served, forwarded on every downstream call.
current_traceparent: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_traceparent", default=None
)

# Names the calling replica (`shipping.2`) to demo upstreams, so a fault can aim at one route.
CALLER_HEADER = "x-demo-caller"

# Paths that are plumbing, not work: they do not count as handled requests.
_PLUMBING = ("/healthz", "/_stats", "/_fault")


def new_traceparent() -> str:
    """A fresh W3C traceparent (version 00, sampled)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def child_traceparent(parent: str | None) -> str:
    """The traceparent for an outgoing call: same trace id, a new span id."""
    parts = (parent or "").split("-")
    if len(parts) == 4 and len(parts[1]) == 32:
        return f"{parts[0]}-{parts[1]}-{secrets.token_hex(8)}-{parts[3]}"
    return new_traceparent()


class Stats:
    """Counters of the work a service did, so experiments can measure wasted work."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self.last_traceparent: str | None = None  # lets tests check that traces propagate

    def incr(self, name: str, n: int = 1) -> None:
        """Add n to one counter."""
        self._counts[name] += n

    def get(self, name: str) -> int:
        """One counter's value (0 when never counted)."""
        return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        """All counters."""
        return dict(self._counts)

    def reset(self) -> None:
        """Zero every counter (between experiment runs)."""
        self._counts.clear()


class TraceAndCount:
    """ASGI middleware: adopt or start the trace context, count handled requests.

    Plain ASGI rather than BaseHTTPMiddleware: it stays off the hot path the overhead
    experiment measures.
    """

    def __init__(self, app: ASGIApp, stats: Stats, start_traces: bool) -> None:
        self.app = app
        self.stats = stats
        self.start_traces = start_traces

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        traceparent = None
        for key, value in scope["headers"]:
            if key == b"traceparent":
                traceparent = value.decode("latin-1")
                break
        if traceparent is None and self.start_traces:
            traceparent = new_traceparent()
        if not str(scope["path"]).startswith(_PLUMBING):
            self.stats.incr("requests")
            self.stats.last_traceparent = traceparent
        token = current_traceparent.set(traceparent)
        try:
            await self.app(scope, receive, send)
        finally:
            current_traceparent.reset(token)


class DownstreamError(Exception):
    """A downstream call failed: 5xx, transport error, timeout, or refused by a breaker.

    `refused` is True when nothing reached the downstream's work: a breaker (in-process or
    in the sidecar) or the cascade said no.
    """

    def __init__(self, upstream: str, status: int, detail: str, refused: bool = False) -> None:
        super().__init__(f"{upstream}: {status} {detail}")
        self.upstream = upstream
        self.status = status
        self.detail = detail
        self.refused = refused


@dataclass
class Downstream:
    """One upstream a service calls, with its timeout and, in plain mode, its breaker."""

    name: str
    base_url: str
    client: httpx.AsyncClient
    timeout: float
    stats: Stats
    breaker: CircuitBreaker | None = None
    # The other replicas of the downstream, called round robin with `base_url` (no sidecar).
    more_urls: tuple[str, ...] = ()
    caller: str = ""  # this replica's name, sent as CALLER_HEADER (faults may aim at one)
    _turn: int = 0

    async def call(
        self, method: str, path: str, json: Any = None, serving: str | None = None
    ) -> httpx.Response:
        """Call the downstream; 2xx-4xx are returned, anything else raises DownstreamError.

        `serving` names the endpoint this call serves (`"gateway POST /orders"`), for a caller
        whose sidecar cannot learn it from the trace: the one that starts the trace itself.
        """
        headers = {"traceparent": child_traceparent(current_traceparent.get())}
        if self.caller:
            headers[CALLER_HEADER] = self.caller
        if serving is not None:
            headers[SERVING_ENDPOINT_HEADER] = serving
        if self.breaker is None:
            return await self._send(method, path, json, headers)
        from cascadebreaker import CircuitOpenError

        try:
            permit = self.breaker.acquire()
        except CircuitOpenError as exc:
            self.stats.incr(f"refused.{self.name}")
            reason = f"circuit {exc.state.value}"
            raise DownstreamError(self.name, 503, reason, refused=True) from exc
        try:
            response = await self._send(method, path, json, headers)
        except DownstreamError as exc:
            permit.failure(exc)
            raise
        except BaseException:
            permit.ignore()  # cancelled: says nothing about the downstream's health
            raise
        permit.success()
        return response

    async def call_ok(self, method: str, path: str, json: Any = None) -> httpx.Response:
        """Like call(), but a 4xx also fails the step (without counting against the breaker)."""
        response = await self.call(method, path, json)
        if not response.is_success:
            raise DownstreamError(self.name, response.status_code, _detail(response))
        return response

    async def _send(
        self, method: str, path: str, json: Any, headers: dict[str, str]
    ) -> httpx.Response:
        self.stats.incr(f"calls.{self.name}")
        base_url = self.base_url
        if self.more_urls:
            urls = (self.base_url, *self.more_urls)
            self._turn += 1
            base_url = urls[self._turn % len(urls)]
        try:
            response = await self.client.request(
                method, base_url + path, json=json, headers=headers, timeout=self.timeout
            )
        except httpx.TimeoutException as exc:
            raise DownstreamError(self.name, 504, "timeout") from exc
        except httpx.HTTPError as exc:
            raise DownstreamError(self.name, 502, type(exc).__name__) from exc
        if response.status_code >= 500:
            raise DownstreamError(
                self.name, response.status_code, _detail(response), _is_refusal(response)
            )
        return response


def _detail(response: httpx.Response) -> str:
    """A short reason from an error response: the failing upstream and what it said."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if not isinstance(body, dict):
        return str(body)[:200]
    reason = str(body.get("detail") or body.get("error") or response.reason_phrase)
    upstream = body.get("upstream")
    return f"{upstream}: {reason}" if upstream else reason


def _is_refusal(response: httpx.Response) -> bool:
    """Did a breaker or the cascade answer instead of the downstream doing work?"""
    if response.status_code != 503:
        return False
    try:
        return is_refusal(response.status_code, response.json())
    except ValueError:
        return False


@dataclass
class ServiceContext:
    """Everything a service's routes need: its name, topology, counters and downstreams."""

    name: str
    topology: Topology
    stats: Stats = field(default_factory=Stats)
    downstreams: dict[str, Downstream] = field(default_factory=dict)
    precheck: AvailabilityCheck = field(default_factory=NoPrecheck)
    client: httpx.AsyncClient | None = None

    def downstream(self, name: str) -> Downstream:
        """The downstream called `name` (set up at startup)."""
        return self.downstreams[name]

    def open_clients(self) -> None:
        """Create the shared HTTP client, the downstreams and (plain mode) their breakers."""
        # trust_env=False: a proxy configured in the environment must not hijack loopback calls.
        self.client = httpx.AsyncClient(
            trust_env=False,
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=128),
        )
        for upstream in self.topology.service(self.name).calls:
            first, *more = self.topology.upstream_base_urls(self.name, upstream)
            self.downstreams[upstream] = Downstream(
                upstream,
                first,
                self.client,
                self.topology.call_timeout(upstream),
                self.stats,
                _make_breaker(f"{self.name}->{upstream}", self.topology)
                if self.topology.mode is Mode.PLAIN
                else None,
                tuple(more),
                self.name,
            )
        admin = self.topology.service(self.name).admin_url
        if admin is not None and self.topology.precheck:
            self.precheck = SidecarPrecheck(self.client, admin)

    async def close_clients(self) -> None:
        """Close the shared HTTP client."""
        if self.client is not None:
            await self.client.aclose()

    def stats_body(self) -> dict[str, Any]:
        """The body of GET /_stats: counters plus the state of in-process breakers."""
        body: dict[str, Any] = {
            "service": self.name,
            "counts": self.stats.snapshot(),
            "last_traceparent": self.stats.last_traceparent,
        }
        breakers = {
            name: d.breaker.snapshot().to_dict()
            for name, d in self.downstreams.items()
            if d.breaker
        }
        if breakers:
            body["breakers"] = breakers
        return body


def _make_breaker(name: str, topology: Topology) -> CircuitBreaker:
    from cascadebreaker import CircuitBreaker, MemoryStore

    t = topology.timings
    policy = None
    if t.policy == "failure_rate":
        from cascadebreaker import CountWindow, FailureRate
        from cascadebreaker.demo.topology import FAILURE_RATE, FAILURE_WINDOW

        window = CountWindow(FAILURE_WINDOW)
        policy = FailureRate(window, FAILURE_RATE, FAILURE_WINDOW // 2)
    return CircuitBreaker(
        name,
        failure_threshold=t.failure_threshold,
        recovery_timeout=t.recovery_timeout,
        half_open_max_calls=t.half_open_max_calls,
        policy=policy,
        store=MemoryStore(),
    )


def service_app(ctx: ServiceContext, routes: Callable[[FastAPI], None]) -> ASGIApp:
    """A FastAPI app with the shared plumbing (/healthz, /_stats) and the service's routes."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        ctx.open_clients()
        yield
        await ctx.close_clients()

    app = FastAPI(title=ctx.name, lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": ctx.name}

    @app.get("/_stats")
    async def get_stats() -> dict[str, Any]:
        return ctx.stats_body()

    @app.delete("/_stats")
    async def reset_stats() -> dict[str, str]:
        # A fresh start for the next experiment run: counters and in-process breakers.
        ctx.stats.reset()
        for downstream in ctx.downstreams.values():
            if downstream.breaker is not None:
                downstream.breaker.reset()
        return {"status": "reset"}

    routes(app)
    return TraceAndCount(app, ctx.stats, start_traces=ctx.name == "gateway")

"""The async driver of the call pipeline: one call made from code, the whole response buffered.

`SidecarRuntime.call` and the gRPC `Call` (through `SidecarRuntime.call_raw`) run here. The
pipeline decides, as for the HTTP exchange: hooks and reroute, admission, classification,
replay of a stale keep-alive connection, retries within the budget, stats; this loop only
awaits what it asks for.

One coroutine and one object per call: the call's state is also the sink its response
arrives in (`AwaitedCall`), as the HTTP exchange is both; the connection is used directly, no
client layer in between (each awaited layer costs every resumption a frame).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from cascadebreaker.sidecar.http.framing import whole_body_framing
from cascadebreaker.sidecar.http.wire import RawHeaders, forwardable, request_head
from cascadebreaker.sidecar.proxy.errors import CallRejected, UnknownUpstream
from cascadebreaker.sidecar.proxy.hooks import Direction
from cascadebreaker.sidecar.proxy.pipeline import CALL_SLOTS, FAIL, REPLAY, AdmitLater, CallState
from cascadebreaker.sidecar.upstream.client import HeadersArg, RawResponse
from cascadebreaker.sidecar.upstream.connection import ResponseSink
from cascadebreaker.sidecar.upstream.model import UpstreamError, UpstreamResponse

if TYPE_CHECKING:
    from cascadebreaker import CircuitBreaker, Permit
    from cascadebreaker.core.fast_view import FastView
    from cascadebreaker.sidecar.proxy.hooks import RequestInfo, SettledCall
    from cascadebreaker.sidecar.proxy.routes import Route
    from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime

__all__ = ["AwaitedCall", "call_raw", "call_upstream"]

CLIENT: Final = "grpc"  # what hooks see as the client of a call made from code


class AwaitedCall(CallState, ResponseSink):
    """One call of the async driver: its state for the pipeline (`pipeline.CallState`) and the
    `ResponseSink` its response is collected in, whole, into `future`."""

    __slots__ = (*CALL_SLOTS, "body", "chunks", "future", "response_headers", "status")

    def __init__(self, route: Route, method: bytes, path: bytes, headers: RawHeaders) -> None:
        self.direction = Direction.OUTBOUND
        self.route = route
        self.method = method
        self.path = path
        self.headers = headers
        self.client = CLIENT
        self.has_body = False
        self.resendable = True  # the body is held whole: it can be sent again
        self.info: RequestInfo | None = None
        self.settled: SettledCall | None = None
        self.admitted = 0
        self.breaker: CircuitBreaker | None = None
        self.view: FastView | None = None
        self.permit: Permit | None = None
        self.attempt = 0
        self.turn = 0
        self.started_at = 0.0
        self.closed = False
        self.future: asyncio.Future[None] | None = None
        self.status = 0
        self.response_headers: RawHeaders = []
        self.chunks: list[bytes] = []
        self.body = b""

    def mark_started(self, at: float) -> None:
        self.started_at = at

    # -- ResponseSink (one exchange at a time; `future` is fresh for each) -------------------
    def response_head(
        self,
        status: int,
        reason: bytes,
        headers: RawHeaders,
        chunked: bool,
        content_length: int | None,
    ) -> None:
        """Keep the head."""
        self.status = status
        self.response_headers = headers

    def response_body(self, data: bytes) -> None:
        """Keep a piece of the body."""
        self.chunks.append(data)

    def response_end(self) -> None:
        """The response is whole: wake the driver."""
        future = self.future
        if future is not None and not future.done():
            chunks = self.chunks
            self.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            future.set_result(None)

    def response_failed(self, error: UpstreamError) -> None:
        """The exchange failed: the driver gets the error."""
        future = self.future
        if future is not None and not future.done():
            future.set_exception(error)

    def upstream_writable(self, writable: bool) -> None:
        """The whole body is written at once: nothing to pause."""


async def call_raw(
    runtime: SidecarRuntime,
    upstream: str,
    method: bytes,
    path: bytes,
    headers: RawHeaders,
    body: bytes = b"",
    timeout: float | None = None,  # noqa: ASYNC109 - per read, as in the HTTP path
) -> RawResponse:
    """One call through the pipeline, given as the wire has it: `headers` end-to-end only
    (`forwardable`); the response's headers raw too, as hooks left them."""
    route = runtime.routes.get(upstream)
    if route is None:
        raise UnknownUpstream(upstream)
    call = AwaitedCall(route, method, path, headers)
    if body:
        call.has_body = True
    pipeline = runtime.pipeline
    loop = pipeline.loop
    head_request = method == b"HEAD"
    verdict = pipeline.start(call)
    while True:
        if isinstance(verdict, AdmitLater):
            verdict = await pipeline.admit_later(call)
        if verdict is not None:
            raise CallRejected(call.route.name, verdict)
        try:
            # `Route.pool_for` and the request head, inlined: they run once per attempt.
            route = call.route
            pools = route.pools
            pool = pools[0] if len(pools) == 1 else pools[(call.turn + call.attempt) % len(pools)]
            conn = pool.acquire_nowait() or await pool.connect()
            target = pool.target
            sent = call.headers
            info = call.info
            if info is not None and info.add_headers:
                sent = [*sent, *info.add_headers]
            settled = call.settled
            head = request_head(
                method,
                target.base_path + (path or b"/"),
                target.authority,
                sent,
                whole_body_framing(method, len(body)),
                b"",
                b"" if settled is None else settled.lines,
            )
            future = call.future = loop.create_future()
            call.chunks = []
            conn.send(
                head,
                call,
                timeout if timeout is not None else route.timeout,
                head_request,
                body,
            )
            try:
                await future
            except asyncio.CancelledError:
                conn.abort()  # its exchange cannot be finished
                raise
        except UpstreamError as error:
            action = pipeline.failed(call, error)
            if action == FAIL:
                raise
            verdict = None if action == REPLAY else pipeline.retry(call)
            continue
        except BaseException:
            pipeline.cancelled(call)
            raise
        status = call.status
        response_headers = call.response_headers
        # Hooks see (and may edit) the raw headers, as on the HTTP path.
        if pipeline.response(call, status, response_headers):
            verdict = pipeline.retry(call)
            continue
        pipeline.finish(call)
        info = call.info
        return RawResponse(
            status,
            response_headers if info is None else info.response_headers,
            call.body,
        )


async def call_upstream(
    runtime: SidecarRuntime,
    upstream: str,
    method: str,
    path: str,
    headers: HeadersArg = (),
    body: bytes = b"",
    timeout: float | None = None,  # noqa: ASYNC109 - per read, as in the HTTP path
) -> UpstreamResponse:
    """One call through the pipeline (see `SidecarRuntime.call`)."""
    if upstream not in runtime.routes:
        raise UnknownUpstream(upstream)
    items = headers.items() if isinstance(headers, Mapping) else headers
    raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in items]
    # Hooks see what the HTTP path shows them: end-to-end headers only.
    response = await call_raw(
        runtime,
        upstream,
        method.upper().encode("ascii"),
        path.encode(),
        forwardable(raw, True),
        body,
        timeout,
    )
    return response.decoded()  # decoded once, after the hooks

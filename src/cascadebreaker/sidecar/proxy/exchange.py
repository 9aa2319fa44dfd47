"""The HTTP driver of the call pipeline: stream one request to an upstream and its response back.

Callback-driven (no task per request): the server connection feeds the request in, the
upstream connection feeds the response back, backpressure is passed across both ways. Every
decision (hooks, admission, classification, replay, retry, stats) is the pipeline's; this
module carries them out on the two connections.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

from cascadebreaker.sidecar.http.framing import (
    CHUNKED,
    client_response_framing,
    forward_request_framing,
)
from cascadebreaker.sidecar.http.tunnel import Tunnel
from cascadebreaker.sidecar.http.wire import (
    LAST_CHUNK,
    RawHeaders,
    chunk,
    error_response,
    request_head,
    response_head,
)
from cascadebreaker.sidecar.logs import RateLimitedLog
from cascadebreaker.sidecar.proxy.hooks import Direction, Rejection, RequestInfo, SettledCall
from cascadebreaker.sidecar.proxy.pipeline import (
    CALL_SLOTS,
    REPLAY,
    RETRY,
    AdmitLater,
    CallState,
)
from cascadebreaker.sidecar.proxy.replies import FixedExchange, upstream_error_reply
from cascadebreaker.sidecar.upstream.connection import ResponseSink, UpstreamConnection
from cascadebreaker.sidecar.upstream.model import UpstreamError, UpstreamTarget

if TYPE_CHECKING:
    from cascadebreaker import CircuitBreaker, Permit
    from cascadebreaker.core.fast_view import FastView
    from cascadebreaker.sidecar.http.connection import ServerConnection
    from cascadebreaker.sidecar.http.exchange import RequestHead
    from cascadebreaker.sidecar.proxy.routes import Route
    from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime

log = logging.getLogger("cascadebreaker.sidecar")
_admission_errors: Final = RateLimitedLog(log, logging.ERROR)

# Request body held while the upstream is being connected; past it the client is paused.
_PENDING_LIMIT: Final = 262144
# A body up to this size is kept while an upstream has several instances, so a call one
# instance's sidecar refused can go to the next (a larger one streams and is not kept).
_KEPT_LIMIT: Final = 65536
_BACKPRESSURE: Final = 2  # ServerConnection's pause reason for an upstream not taking the body

__all__ = ["ProxyExchange"]


class ProxyExchange(FixedExchange, CallState, ResponseSink):
    """Forwards one request to a route's upstream and streams the response back; it is also
    the call's state for the pipeline (no second object per request)."""

    __slots__ = (
        "_head",
        "_head_target",
        "_kept",
        "_out",
        "_pending",
        "_pending_size",
        "chunked_out",
        "head_sent",
        "keep_alive",
        "pipeline",
        "runtime",
        "upstream",
        *CALL_SLOTS,
    )

    def __init__(
        self,
        runtime: SidecarRuntime,
        conn: ServerConnection,
        request: RequestHead,
        route: Route,
        path: bytes,
        direction: Direction,
    ) -> None:
        # FixedExchange's fields, set here: one call fewer per request.
        self.conn = conn
        self.request = request
        self.has_body = has_body = request.chunked or bool(request.content_length)
        self.request_done = not has_body
        self.finished = False
        self._deferred = None
        self.runtime = runtime
        self.pipeline = runtime.pipeline
        # The call's state, as the pipeline reads and keeps it (pipeline.CallState).
        self.direction = direction
        self.route = route
        self.method = request.method
        self.path = path
        self.headers = request.headers
        self.client = request.client
        self.resendable = not has_body  # a streamed body is not kept: it cannot be sent again
        self._kept: list[bytes] | None = None  # the body as forwarded, while it may be resent
        length = request.content_length
        if has_body and len(route.pools) > 1 and length is not None and length <= _KEPT_LIMIT:
            self._kept = []
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
        self.upstream: UpstreamConnection | None = None
        self.head_sent = False
        self.chunked_out = False
        self.keep_alive = request.keep_alive
        self._head = b""
        self._head_target: UpstreamTarget | None = None
        self._out = b""
        self._pending: list[bytes] | None = []
        self._pending_size = 0

    def mark_started(self, at: float) -> None:
        self.started_at = at

    # -- Exchange ---------------------------------------------------------------------------
    def start(self) -> None:
        """Ask the pipeline (hooks, breaker), then connect to the upstream."""
        verdict = self.pipeline.start(self)
        if verdict is not None:
            self._proceed(verdict)
        elif self.has_body:
            # A body follows, usually in the bytes already read: dispatch after the parser
            # has fed them, so the head and the body leave in one write (one syscall).
            self.pipeline.loop.call_soon(self._dispatch_if_live)
        else:
            self._dispatch()

    def _dispatch_if_live(self) -> None:
        if not self.finished and self.upstream is None:
            self._dispatch()

    def request_body(self, data: bytes) -> None:
        """Stream to the upstream (or hold until it is connected)."""
        if self.finished:
            return
        pieces = chunk(data) if self.request.chunked else [data]
        self._forward(pieces)

    def request_end(self) -> None:
        """Terminate a chunked request body."""
        self.request_done = True
        if self._kept is not None:
            self.resendable = True  # the whole body is kept
        if self.finished:
            super().request_end()
            return
        if self.request.chunked:
            self._forward([LAST_CHUNK])
        # Without a body the upstream was sent a complete request already.
        if self.has_body and self._pending is None and self.upstream is not None:
            self.upstream.end_request()

    def downstream_writable(self, writable: bool) -> None:
        """Pause the upstream while the client is slow."""
        if self.upstream is not None:
            if writable:
                self.upstream.resume_reading()
            else:
                self.upstream.pause_reading()

    def connection_lost(self) -> None:
        """The client left: drop the upstream exchange, release a probe slot."""
        super().connection_lost()
        self._abort_upstream()
        self.pipeline.cancelled(self)

    def request_failed(self, outcome: str) -> bool:
        """The client stalled or sent a bad body: drop the upstream exchange; its breaker hears
        nothing (the permit is given back unrecorded)."""
        if self.finished:
            return super().request_failed(outcome)
        self.finished = True
        written = self.head_sent and not self._out
        self._abort_upstream()
        self.pipeline.client_failed(self, outcome)
        return not written

    # -- ResponseSink -----------------------------------------------------------------------
    def response_head(
        self,
        status: int,
        reason: bytes,
        headers: RawHeaders,
        chunked: bool,
        content_length: int | None,
    ) -> None:
        """Record the outcome and write the response head."""
        if status == 101:
            self._tunnel(reason, headers)
            return
        if self.pipeline.response(self, status, headers):
            self._abort_upstream()
            self._rewind()
            self._proceed(self.pipeline.retry(self))
            return
        request = self.request
        framing, self.chunked_out, self.keep_alive = client_response_framing(
            status,
            request.method == b"HEAD",
            content_length,
            request.http10,
            self.keep_alive and not self.conn.tracker.draining,
        )
        # The head waits for the first body piece: one write (one syscall, one segment) for both.
        self._out = response_head(status, reason, headers, framing, self.runtime.via_line)
        self.head_sent = True

    def response_body(self, data: bytes) -> None:
        """Stream a piece of the body to the client."""
        if self.chunked_out:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        if self._out:
            data = self._out + data
            self._out = b""
            if not self.conn.writable and self.upstream is not None:
                self.upstream.pause_reading()
        self.conn.write(data)

    def response_end(self) -> None:
        """Finish the response; the upstream connection is already back in its pool."""
        self.upstream = None
        if self.finished:
            return
        if self.chunked_out:
            self.conn.write(self._out + LAST_CHUNK)
        elif self._out:
            self.conn.write(self._out)
        self._out = b""
        self.finished = True
        self.pipeline.finish(self)
        self.conn.response_done(self, self.keep_alive and self.request_done)

    def response_failed(self, error: UpstreamError) -> None:
        """Replay, retry, answer 502/504, or cut a response already under way."""
        self.upstream = None
        if self.finished:
            return
        if self.head_sent:
            if not self._out:  # the client has part of the response: cut it short
                self.pipeline.truncated(self)
                self.finished = True
                self.conn.abort()
                return
            self._out = b""  # nothing reached the client yet: an error reply is still possible
            self.head_sent = self.chunked_out = False
        action = self.pipeline.failed(self, error)
        if action == REPLAY:
            self._rewind()
            self._connect_new()
        elif action == RETRY:
            self._rewind()
            self._proceed(self.pipeline.retry(self))
        else:
            self.reply(upstream_error_reply(self.route.name, error))

    def upstream_writable(self, writable: bool) -> None:
        """Stop reading the client's body while the upstream is not taking it."""
        if writable:
            self.conn.resume_reading(_BACKPRESSURE)
        else:
            self.conn.pause_reading(_BACKPRESSURE)

    # -- internals --------------------------------------------------------------------------
    def _proceed(self, verdict: Rejection | AdmitLater | None) -> None:
        """Carry out an admission verdict: send, answer the rejection, or wait for it."""
        if verdict is None:
            self._dispatch()
        elif isinstance(verdict, AdmitLater):
            task = self.pipeline.loop.create_task(self.pipeline.admit_later(self))
            task.add_done_callback(self._admitted)
        else:
            self.reply(verdict.to_bytes)

    def _admitted(self, task: asyncio.Task[Rejection | None]) -> None:
        if task.cancelled():
            return
        error = task.exception()  # retrieved even when unused: no "never retrieved" warning
        if self.finished:  # the client left meanwhile (the pipeline gave the permit back)
            return
        if error is not None:
            _admission_errors("breaker admission failed for %s", self.route.name, exc_info=error)
            self.reply(lambda close: error_response(500, "internal error", close))
            return
        self._proceed(task.result())

    def _tunnel(self, reason: bytes, headers: RawHeaders) -> None:
        """The upstream accepted the WebSocket handshake: answer 101, then join the two."""
        upstream = self.upstream
        assert upstream is not None
        self.pipeline.upgraded(self, headers)
        self.conn.write(
            response_head(101, reason, headers, b"connection: upgrade\r\n", self.runtime.via_line)
        )
        self.finished = True
        self.upstream = None
        tunnel = Tunnel(self.conn, upstream)
        upstream.start_tunnel(tunnel)
        self.conn.start_tunnel(tunnel)

    def _abort_upstream(self) -> None:
        if self.upstream is not None:
            self.upstream.abort()
            self.upstream = None

    def _dispatch(self) -> None:
        route = self.route
        pool = route.pool if len(route.pools) == 1 else route.pool_for(self.turn, self.attempt)
        if self._head and pool.target is not self._head_target:
            self._head = b""  # another instance: its own authority and base path
        conn = pool.acquire_nowait()
        if conn is None:
            self._connect_new()
        else:
            self._send(conn)

    def _connect_new(self) -> None:
        pool = self.route.pool_for(self.turn, self.attempt)
        task = pool.loop.create_task(pool.connect())
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[UpstreamConnection]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            conn = task.result()
            if self.finished:
                conn.pool.release(conn)  # the client left meanwhile; keep it
            else:
                self._send(conn)
        elif isinstance(error, UpstreamError):
            self.response_failed(error)
        else:
            self.response_failed(UpstreamError(self.route.name, str(error)))

    def _send(self, upstream: UpstreamConnection) -> None:
        if not self._head:
            self._head_target = upstream.pool.target
            self._head = self._build_head(upstream.pool.target)
        self.upstream = upstream
        pending = self._pending
        body = b""
        if pending:
            body = b"".join(pending)
            if self._pending_size > _PENDING_LIMIT:
                self.conn.resume_reading(_BACKPRESSURE)
        self._pending = None
        request = self.request
        upstream.send(
            self._head,
            self,
            self.route.timeout,
            request.method == b"HEAD",
            body,
            self.request_done,
            bool(request.upgrade),
        )

    def _rewind(self) -> None:
        """Before sending again: the kept body is pending again, for the next connection."""
        if self._kept is not None:
            self._pending = list(self._kept)
            self._pending_size = sum(len(p) for p in self._kept)

    def _forward(self, pieces: list[bytes]) -> None:
        if self._kept is not None:
            self._kept += pieces
        if self._pending is None:
            if self.upstream is not None:
                self.upstream.writelines(pieces)
            return
        self._pending += pieces
        self._pending_size += sum(len(p) for p in pieces)
        if self._pending_size > _PENDING_LIMIT:
            self.conn.pause_reading(_BACKPRESSURE)

    def _build_head(self, target: UpstreamTarget) -> bytes:
        request = self.request
        headers = request.headers  # copied before anything is added: it is the request's
        host = target.authority
        lines = self.runtime.via_line
        if self.direction is Direction.INBOUND:
            # Transparent towards the app: the caller's Host is kept.
            host = request.host or host
            if request.client:
                lines = self.runtime.inbound_lines(request.client)
        info = self.info
        if info is not None and info.add_headers:
            headers = headers + info.add_headers
        settled = self.settled
        if request.upgrade:  # a WebSocket handshake: hop-by-hop, so re-added for this hop
            headers = [*headers, (b"connection", b"upgrade"), (b"upgrade", request.upgrade)]
        length = CHUNKED if request.chunked else request.content_length
        return request_head(
            request.method,
            target.base_path + self.path,
            host,
            headers,
            forward_request_framing(length),
            lines,
            b"" if settled is None else settled.lines,
        )

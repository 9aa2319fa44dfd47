"""The proxy's exchanges: stream one request to an upstream and its response back, or reply.

Callback-driven (no task per request): the server connection feeds the request in, the
upstream connection feeds the response back, backpressure is passed across both ways.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from cascadebreaker import CircuitOpenError, Permit, State
from cascadebreaker.sidecar.connections import RateLimitedLog
from cascadebreaker.sidecar.hooks import Direction, Rejection, RequestInfo
from cascadebreaker.sidecar.http_server import RequestHead, ServerConnection
from cascadebreaker.sidecar.replies import FixedExchange, ReplyBuilder, rejection_for_open_circuit
from cascadebreaker.sidecar.tunnel import Tunnel
from cascadebreaker.sidecar.upstream import (
    UpstreamConnection,
    UpstreamError,
    UpstreamReset,
)
from cascadebreaker.sidecar.wire import (
    LAST_CHUNK,
    RawHeaders,
    chunk,
    error_response,
    request_head,
    response_head,
)

if TYPE_CHECKING:
    from cascadebreaker.sidecar.routes import Route
    from cascadebreaker.sidecar.runtime import SidecarRuntime

log = logging.getLogger("cascadebreaker.sidecar")
_admission_errors = RateLimitedLog(log, logging.ERROR)

_PENDING_LIMIT = 262144
_IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"PUT", b"DELETE", b"TRACE"})
_ERRORS = {
    "timeout": "upstream timeout",
    "connect": "upstream unreachable",
    "reset": "upstream connection reset",
    "protocol": "bad upstream response",
}

__all__ = ["FixedExchange", "ProxyExchange", "ReplyBuilder", "rejection_for_open_circuit"]


class ProxyExchange(FixedExchange):
    """Forwards one request to a route's upstream and streams the response back."""

    __slots__ = (
        "_head",
        "_out",
        "_pending",
        "_pending_size",
        "attempt",
        "chunked_out",
        "direction",
        "head_sent",
        "info",
        "keep_alive",
        "path",
        "permit",
        "route",
        "runtime",
        "started_at",
        "upstream",
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
        super().__init__(conn, request)
        self.runtime = runtime
        self.route = route
        self.path = path
        self.direction = direction
        self.upstream: UpstreamConnection | None = None
        self.permit: Permit | None = None
        self.info: RequestInfo | None = None
        self.head_sent = False
        self.chunked_out = False
        self.keep_alive = request.keep_alive
        self.attempt = 0
        self.started_at = 0.0
        self._head = b""
        self._out = b""
        self._pending: list[bytes] | None = []
        self._pending_size = 0

    # -- Exchange ---------------------------------------------------------------------------
    def start(self) -> None:
        """Hooks, then the breaker, then an upstream connection."""
        route = self.route
        self.started_at = route.pool.loop.time()
        runtime = self.runtime
        if runtime.hooks:
            info = self.info = RequestInfo(
                self.direction,
                runtime.service,
                route.name,
                self.request.method.decode(),
                self.path.decode("latin-1"),
                self.request.headers,
                self.request.client,
                runtime.route_resolver,
            )
            rejection = runtime.hooks.on_request(info)
            if rejection is not None:
                self._reject(rejection)
                return
            if info.reroute is not None and info.reroute in runtime.routes:
                self.route = runtime.routes[info.reroute]  # the primary's alternative
        if self.route.retry_attempts:
            self.route.budget.deposit()
        if self._acquire():
            if self.request.has_body:
                # A body follows, usually in the bytes already read: dispatch after the parser
                # has fed them, so the head and the body leave in one write (one syscall).
                self.route.pool.loop.call_soon(self._dispatch_if_live)
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
        if self.finished:
            super().request_end()
            return
        if self.request.chunked:
            self._forward([LAST_CHUNK])
        if self._pending is None and self.upstream is not None:
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
        if self._drop_upstream():
            self.route.stats.count("cancelled")

    def request_failed(self, outcome: str) -> bool:
        """The client stalled or sent a bad body: drop the upstream exchange; its breaker hears
        nothing (the permit is given back unrecorded)."""
        if self.finished:
            return super().request_failed(outcome)
        self.finished = True
        written = self.head_sent and not self._out
        self._drop_upstream()
        self.route.stats.count(outcome)
        return not written

    def _drop_upstream(self) -> bool:
        """Abort the upstream exchange; give the permit back unrecorded (True if one was held)."""
        if self.upstream is not None:
            self.upstream.abort()
            self.upstream = None
        permit = self.permit
        if permit is None:
            return False
        self.permit = None
        permit.ignore()
        return True

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
        route = self.route
        failed = route.is_failure(status)
        if failed and status in route.retry_statuses and self._may_retry():
            self._record(False, None, "failure_status")
            if self.upstream is not None:
                self.upstream.abort()
                self.upstream = None
            self._retry()
            return
        self._record(not failed, None, "failure_status" if failed else "success")
        keep_alive = self.keep_alive and not self.conn.tracker.draining
        if self.request.method == b"HEAD" or status == 204 or status == 304:
            # No body follows; a declared length (of the would-be body) passes through.
            framing = b"" if content_length is None else b"content-length: %d\r\n" % content_length
        elif content_length is not None:
            framing = b"content-length: %d\r\n" % content_length
        elif not self.request.http10:
            framing = b"transfer-encoding: chunked\r\n"
            self.chunked_out = True
        else:
            framing = b""  # an HTTP/1.0 client: the body ends when the connection closes
            keep_alive = False
        if not keep_alive:
            framing += b"connection: close\r\n"
        elif self.request.http10:
            framing += b"connection: keep-alive\r\n"  # HTTP/1.0 closes unless told otherwise
        self.keep_alive = keep_alive
        if self.info is not None:
            # Hooks read the upstream's response headers and may add their own.
            self.info.response_headers = headers
            self.runtime.hooks.on_response(self.info, status, "failure" if failed else "success")
        headers.append((b"via", self.runtime.via))
        # The head waits for the first body piece: one write (one syscall, one segment) for both.
        self._out = response_head(status, reason, headers, framing)
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
        route = self.route
        route.stats.observe(route.pool.loop.time() - self.started_at)
        self.conn.response_done(self, self.keep_alive and self.request_done)

    def response_failed(self, error: UpstreamError) -> None:
        """Replay, retry, answer 502/504, or cut a response already under way."""
        self.upstream = None
        if self.finished:
            return
        route = self.route
        if self.head_sent:
            if not self._out:  # the client has part of the response: cut it short
                route.stats.count("reset")
                self.finished = True
                self.conn.abort()
                return
            self._out = b""  # nothing reached the client yet: an error reply is still possible
            self.head_sent = self.chunked_out = False
        if (
            isinstance(error, UpstreamReset)
            and error.reused
            and not error.response_started
            and not self.request.has_body
            and self.attempt < 2
        ):
            # A keep-alive connection the upstream had closed: replay on a fresh one, unrecorded.
            self.attempt += 1
            self._connect_new()
            return
        self._record(False, error, error.kind)
        if self._may_retry():
            self._retry()
            return
        status = error.status
        message = _ERRORS.get(error.kind, "upstream error")
        if self.info is not None:
            self.runtime.hooks.on_response(self.info, status, "failure")
        route.stats.observe(route.pool.loop.time() - self.started_at)
        self.reply(
            lambda close: error_response(
                status, message, close, upstream=route.name, detail=error.detail
            )
        )

    def upstream_writable(self, writable: bool) -> None:
        """Stop reading the client's body while the upstream is not taking it."""
        if writable:
            self.conn.resume_reading(2)
        else:
            self.conn.pause_reading(2)

    # -- internals --------------------------------------------------------------------------
    def _tunnel(self, reason: bytes, headers: RawHeaders) -> None:
        """The upstream accepted the WebSocket handshake: answer 101, then join the two."""
        upstream = self.upstream
        assert upstream is not None
        self._record(True, None, "success")
        if self.info is not None:
            self.info.response_headers = headers
            self.runtime.hooks.on_response(self.info, 101, "success")
        headers.append((b"via", self.runtime.via))
        self.conn.write(response_head(101, reason, headers, b"connection: upgrade\r\n"))
        self.finished = True
        self.upstream = None
        tunnel = Tunnel(self.conn, upstream)
        upstream.start_tunnel(tunnel)
        self.conn.start_tunnel(tunnel)

    def _acquire(self) -> bool:
        """True: admitted, go on. False: answered, or the admission continues in a callback."""
        route = self.route
        breaker = route.breaker
        if breaker is None:
            return True
        if route.shared_store and breaker.state is not State.CLOSED:
            # Off the closed path a shared store may ask Redis: never on the event loop.
            task = route.pool.loop.create_task(breaker.aacquire())
            task.add_done_callback(self._admitted)
            return False
        try:
            self.permit = breaker.acquire()
        except CircuitOpenError as exc:
            self._reject(rejection_for_open_circuit(route.name, exc))
            return False
        return True

    def _admitted(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if self.finished:  # the client left meanwhile
            if error is None:
                task.result().ignore()
            return
        if isinstance(error, CircuitOpenError):
            self._reject(rejection_for_open_circuit(self.route.name, error))
        elif error is not None:
            _admission_errors("breaker admission failed for %s", self.route.name, exc_info=error)
            self.reply(lambda close: error_response(500, "internal error", close))
        else:
            self.permit = task.result()
            self._dispatch()

    def _reject(self, rejection: Rejection) -> None:
        self.route.stats.count("rejected")
        if self.info is not None:
            self.runtime.hooks.on_response(self.info, rejection.status, "rejected")
        self.reply(rejection.to_bytes)

    def _record(self, success: bool, error: Exception | None, outcome: str) -> None:
        self.route.stats.count(outcome)
        permit = self.permit
        if permit is not None:
            self.permit = None
            if success:
                permit.success()
            else:
                permit.failure(error)

    def _may_retry(self) -> bool:
        route = self.route
        return (
            self.attempt < route.retry_attempts
            and not self.request.has_body
            and self.request.method in _IDEMPOTENT  # a retried POST could act twice
            and not self.head_sent
            and route.budget.withdraw()
        )

    def _retry(self) -> None:
        self.attempt += 1
        if self._acquire():
            self._dispatch()

    def _dispatch(self) -> None:
        conn = self.route.pool.acquire_nowait()
        if conn is None:
            self._connect_new()
        else:
            self._send(conn)

    def _connect_new(self) -> None:
        task = self.route.pool.loop.create_task(self.route.pool.connect())
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[UpstreamConnection]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            conn = task.result()
            if self.finished:
                self.route.pool.release(conn)  # the client left meanwhile; keep it for later
            else:
                self._send(conn)
        elif isinstance(error, UpstreamError):
            self.response_failed(error)
        else:
            self.response_failed(UpstreamError(self.route.name, str(error)))

    def _send(self, upstream: UpstreamConnection) -> None:
        if not self._head:
            self._head = self._build_head()
        self.upstream = upstream
        pending = self._pending
        body = b""
        if pending:
            body = b"".join(pending)
            if self._pending_size > _PENDING_LIMIT:
                self.conn.resume_reading(2)
        self._pending = None
        upstream.send(
            self._head,
            self,
            self.route.timeout,
            self.request.method == b"HEAD",
            body,
            self.request_done,
            bool(self.request.upgrade),
        )

    def _forward(self, pieces: list[bytes]) -> None:
        if self._pending is None:
            if self.upstream is not None:
                self.upstream.writelines(pieces)
            return
        self._pending += pieces
        self._pending_size += sum(len(p) for p in pieces)
        if self._pending_size > _PENDING_LIMIT:
            self.conn.pause_reading(2)

    def _build_head(self) -> bytes:
        request = self.request
        route = self.route
        headers = [*request.headers, (b"via", self.runtime.via)]
        host = route.pool.target.authority
        if self.direction is Direction.INBOUND:
            # Transparent towards the app: the caller's Host is kept.
            host = request.host or host
            if request.client:
                headers.append((b"x-forwarded-for", request.client.encode()))
        if self.info is not None and self.info.add_headers:
            headers += self.info.add_headers
        if request.upgrade:  # a WebSocket handshake: hop-by-hop, so re-added for this hop
            headers += ((b"connection", b"upgrade"), (b"upgrade", request.upgrade))
        if request.chunked:
            framing = b"transfer-encoding: chunked\r\n"
        elif request.content_length is not None:
            framing = b"content-length: " + request.content_length + b"\r\n"
        else:
            framing = b""
        return request_head(
            request.method, route.pool.target.base_path + self.path, host, headers, framing
        )

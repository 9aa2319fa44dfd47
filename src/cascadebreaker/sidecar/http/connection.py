"""The HTTP/1.1 server side: an asyncio.Protocol over httptools, strict about framing and size.

A listener turns each request head into an `Exchange` (via its `RequestHandler`); the connection
feeds the exchange the request body and lets it write the response. Exchanges of pipelined
requests wait in line; reading pauses meanwhile so nothing is buffered without bound.

Bytes that cannot be parsed, or a body the client stops sending, end the connection, but every
complete request before them is answered first; the error reply (400, 408, 431) comes last.
A WebSocket handshake the upstream accepts (101) turns the connection into a byte tunnel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import Final, cast

import httptools

from cascadebreaker.sidecar.http.exchange import Exchange, RequestHandler, RequestHead, TunnelEnd
from cascadebreaker.sidecar.http.framing import FramingError
from cascadebreaker.sidecar.http.limits import ConnectionTracker, Limits
from cascadebreaker.sidecar.http.reader import RequestReader
from cascadebreaker.sidecar.http.wire import error_response, unconnected
from cascadebreaker.sidecar.logs import RateLimitedLog

log: Final = logging.getLogger("cascadebreaker.sidecar")

# Whatever a client can trigger at will is logged at most once per interval.
_client_errors: Final = RateLimitedLog(log, logging.INFO)
_internal_errors: Final = RateLimitedLog(log, logging.ERROR)
_at_capacity: Final = RateLimitedLog(log, logging.WARNING)
_TOO_MANY: Final = error_response(503, "too many connections", close=True)

# Reasons to stop reading from a client (bits of `_pause_reasons`).
_PIPELINED: Final = 1  # a complete request waits for the responses before it
_BACKPRESSURE: Final = 2  # the upstream is not taking the body (or not connected yet)
_FINISHED: Final = 4  # the stream cannot go on (bad bytes, stalled body): only replies are left
_UPGRADING: Final = 8  # a WebSocket handshake waits for the upstream's answer

__all__ = ["ServerConnection"]


class _ErrorReply:
    """The last exchange of a connection that cannot go on: an error reply, then close."""

    def __init__(self, conn: ServerConnection, status: int, message: str) -> None:
        self.conn = conn
        self.status = status
        self.message = message

    def start(self) -> None:
        self.conn.write(error_response(self.status, self.message, close=True))
        self.conn.close()

    def request_body(self, data: bytes) -> None:
        pass

    def request_end(self) -> None:
        pass

    def downstream_writable(self, writable: bool) -> None:
        pass

    def connection_lost(self) -> None:
        pass

    def request_failed(self, outcome: str) -> bool:
        return True


def _ignore(data: bytes) -> None:
    """Where bytes go once the stream cannot be parsed any further."""


class ServerConnection(RequestReader, asyncio.Protocol):
    """One client connection: parses requests and runs their exchanges in order."""

    def __init__(self, handler: RequestHandler, limits: Limits, tracker: ConnectionTracker) -> None:
        super().__init__(limits)
        self.handler = handler
        self.limits = limits
        self.tracker = tracker
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        # Bound once: compiled, `self.loop.time()` and `transport.write(...)` look the method
        # up by name at every call (~150 instructions each, several a request).
        self._now = self.loop.time
        self._write: Callable[[bytes], object] = unconnected
        self.client = ""
        self.closed = False
        self.activity = 0  # data_received calls, for the idle sweep
        self._quiet_mark = -1
        self._quiet_since = 0.0
        self._active: Exchange | None = None
        self._receiving: Exchange | None = None
        self._queue: deque[Exchange] = deque()
        self._pause_reasons = 0  # _PIPELINED | _BACKPRESSURE | _FINISHED | _UPGRADING
        # False while the client is not keeping up (read by exchanges; an attribute, not a
        # property: it is read for every response).
        self.writable = True
        self._unwritable_since = 0.0
        self._eof = False
        self._requests = 0  # request heads received (0: the connection is still silent)
        # Set once the bytes stop being HTTP: a tunnel's sink, or `_ignore` after an error.
        self._divert: Callable[[bytes], None] | None = None
        self._tunnel: TunnelEnd | None = None
        self._held: bytes | None = None  # read after a WebSocket handshake, before its answer
        # The request body being received: bytes so far, and seconds spent waiting for it
        # (the clock stops while the sidecar itself is not reading).
        self._body_bytes = 0
        self._body_mark = 0
        self._body_clock = 0.0
        self._body_idle = 0.0
        self._body_swept = 0.0

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register with the tracker; Nagle off."""
        # uvloop's transports do not subclass asyncio.Transport, hence a cast, not a check.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        self._write = transport.write
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) else ""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.tracker.add(self):
            # Over the cap: answer at once from the descriptors kept in reserve, and let go.
            self.closed = True
            transport.write(_TOO_MANY)
            transport.close()
            _at_capacity(
                "client connection limit reached (%d open): new connections get 503 "
                "(limits.max_connections)",
                len(self.tracker.connections),
            )
            return
        if self.tracker.draining:
            transport.close()

    def data_received(self, data: bytes) -> None:
        """Parse; answer framing and size violations with 400/431 and close."""
        self.activity += 1
        if self._divert is not None:
            self._divert(data)
            return
        try:
            self._feed(data)
        except httptools.HttpParserUpgrade as exc:
            self._after_upgrade(data, exc)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, FramingError):
                self._reject(cause.status, cause.message)
            elif cause is None:
                self._reject(400, "bad request")
            else:  # a bug, not the client's fault: say so, keep serving
                _internal_errors("error while handling a request", exc_info=cause)
                self._reject(500, "internal error")
        except httptools.HttpParserError as exc:
            self._reject(400, f"malformed request: {exc}")
        else:
            if self._in_head:
                # A head still incomplete: bound what the parser buffers for it.
                self._head_bytes += len(data)
                if self._head_bytes > self._max_head_bytes:
                    self._reject(431, "request header fields too large")

    def eof_received(self) -> bool | None:
        """The client half-closed: answer the complete requests, then close. A request cut
        short (its head or body unfinished) will never end: it is dropped, not waited for, and
        never costs the complete ones before it their answers."""
        unfinished = self._receiving
        if unfinished is not None:
            self._receiving = None
            if unfinished is self._active:
                return None  # nothing complete to answer: close (connection_lost drops it)
            self._queue.remove(unfinished)
            unfinished.connection_lost()
        if self._active is None:
            return None
        self._eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        """Tell the exchanges still running (or the tunnel)."""
        self.closed = True
        self.tracker.removed(self)
        for exchange in (self._active, self._receiving, *self._queue):
            if exchange is not None:
                exchange.connection_lost()
        self._active = self._receiving = None
        self._queue.clear()
        if self._tunnel is not None:
            tunnel = self._tunnel
            self._tunnel = None
            tunnel.client_closed()

    def pause_writing(self) -> None:
        """The client reads slower than the upstream sends."""
        self.writable = False
        self._unwritable_since = self._now()
        if self._active is not None:
            self._active.downstream_writable(False)
        elif self._tunnel is not None:
            self._tunnel.client_writable(False)

    def resume_writing(self) -> None:
        """The client caught up."""
        self.writable = True
        if self._active is not None:
            self._active.downstream_writable(True)
        elif self._tunnel is not None:
            self._tunnel.client_writable(True)

    # -- what the reader found --------------------------------------------------------------
    def _head_received(self, request: RequestHead) -> None:
        """Hand the request to the listener's handler; its exchange starts when first in line."""
        if request.expect_continue and self.transport is not None and not request.http10:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if request.content_length is not None or request.chunked:  # a body may follow
            self._body_bytes = self._body_mark = 0
            self._body_clock = self._body_idle = 0.0
            self._body_swept = self._now()
        self._requests += 1
        exchange = self.handler.handle(self, request)
        self._receiving = exchange
        if self._active is None:
            self._active = exchange
            exchange.start()
        else:
            self._queue.append(exchange)

    def _body_received(self, data: bytes) -> None:
        """Request body bytes go to the exchange being received."""
        self._body_bytes += len(data)
        if self._receiving is not None:
            self._receiving.request_body(data)

    # httptools calls it directly: one Python call fewer per request than the reader's
    # forwarding method. A method, not `on_message_complete = _request_complete`: mypyc
    # compiles a class-body alias into an attribute that is never set.
    def on_message_complete(self) -> None:
        """The request is whole; stop reading if its response must wait its turn."""
        exchange = self._receiving
        self._receiving = None
        if exchange is not None:
            exchange.request_end()
            if self._queue and exchange is self._queue[-1] and not self.closed:
                self.pause_reading(_PIPELINED)  # its turn comes when the ones before it are done

    def _request_complete(self) -> None:
        """The request is whole (the reader's hook; httptools calls the method above)."""
        self.on_message_complete()

    # -- used by exchanges ------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """Write response bytes."""
        if self.transport is not None and not self.closed:
            self._write(data)

    def writelines(self, pieces: list[bytes]) -> None:
        """Write several pieces of response bytes."""
        if self.transport is not None and not self.closed:
            self.transport.writelines(pieces)

    def pause_reading(self, reason: int = _BACKPRESSURE) -> None:
        """Stop reading from the client (for a pipelined wait or upstream backpressure)."""
        if not self._pause_reasons and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._pause_reasons |= reason

    def resume_reading(self, reason: int = _BACKPRESSURE) -> None:
        """Read from the client again once no reason to pause remains."""
        if not self._pause_reasons & reason:
            return
        self._pause_reasons &= ~reason
        if not self._pause_reasons and self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def response_done(self, exchange: Exchange, keep_alive: bool) -> None:
        """The exchange wrote its whole response: start the next one or close."""
        if exchange is not self._active or self.closed:
            return
        self._active = None
        if not keep_alive or ((self.tracker.draining or self._eof) and not self._queue):
            self._close()
            return
        if self._queue:
            self._active = self._queue.popleft()
            self._active.start()
        if not self._queue:
            if self._pause_reasons & _PIPELINED:  # resume_reading's own test, inlined
                self.resume_reading(_PIPELINED)
            if self._active is None and self._receiving is None:
                # Idle now: backpressure left over from the finished exchange must not stop
                # the next request from being read.
                if self._pause_reasons & _BACKPRESSURE:
                    self.resume_reading(_BACKPRESSURE)
                if self._held is not None:
                    # The WebSocket handshake was answered without a tunnel: what the client
                    # sent after it is the next request.
                    held, self._held = self._held, None
                    self.resume_reading(_UPGRADING)
                    if held and not self.closed:
                        self.data_received(held)

    def start_tunnel(self, tunnel: TunnelEnd) -> None:
        """The upstream accepted the handshake of the active exchange: bytes pass untouched."""
        self._active = None
        self._tunnel = tunnel
        self._divert = tunnel.from_client
        self._quiet_mark = -1
        held, self._held = self._held, None
        if held:
            tunnel.from_client(held)
        self.resume_reading(_UPGRADING)

    def sweep(self, now: float) -> None:
        """Close this connection if it idled, was too slow sending a request head or body
        (408), or stopped reading a response (it would hold an upstream connection for ever)."""
        tracker = self.tracker
        if self._tunnel is not None:
            self._idle_check(now, tracker.tunnel_idle_timeout)
        elif self._active is not None or self._receiving is not None:
            self._quiet_mark = -1
            if self._receiving is not None and self._body_late(now):
                self._reject(408, "request body not received in time")
            elif not self.writable and now - self._unwritable_since >= tracker.idle_timeout:
                _client_errors(
                    "client %s stopped reading its response: connection cut", self.client
                )
                self.abort()
        elif self._in_head:
            if now - self._head_started >= tracker.header_timeout:
                self._reject(408, "request head not received in time")
        else:
            # Before its first request a connection is a head not yet begun: no longer than
            # header_timeout (a silent client would otherwise hold it for idle_timeout).
            timeout = tracker.idle_timeout if self._requests else tracker.header_timeout
            self._idle_check(now, timeout)

    def _idle_check(self, now: float, timeout: float) -> None:
        if self._quiet_mark != self.activity:
            self._quiet_mark = self.activity
            self._quiet_since = now
        elif now - self._quiet_since >= timeout:
            self._close()

    def _body_late(self, now: float) -> bool:
        """True when the body being received is past its time: no byte for `body_timeout`, or
        slower than `body_timeout` plus one second per `min_body_rate` bytes."""
        elapsed = now - self._body_swept
        self._body_swept = now
        if self._pause_reasons:
            return False  # the sidecar is not reading: not the client's delay
        tracker = self.tracker
        self._body_clock += elapsed
        if self._body_bytes != self._body_mark:
            self._body_mark = self._body_bytes
            self._body_idle = 0.0
        else:
            self._body_idle += elapsed
        if self._body_idle >= tracker.body_timeout:
            return True
        rate = tracker.min_body_rate
        return rate > 0 and self._body_clock >= tracker.body_timeout + self._body_bytes / rate

    def close_if_idle(self) -> None:
        """Close now unless a request or a tunnel is in progress (used when draining)."""
        if self._active is None and not self._in_head and self._tunnel is None:
            self._close()

    def close(self) -> None:
        """Close after what was written (a tunnel's other end closed, an error reply sent)."""
        self._close()

    def abort(self) -> None:
        """Cut the connection (a response cannot be completed)."""
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    # -- internals --------------------------------------------------------------------------
    def _close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def _reject(self, status: int, message: str) -> None:
        """The stream cannot go on (bad bytes, too large, too slow): answer every complete
        request before this one, then `status`, then close."""
        if self.closed or self._divert is _ignore:
            return
        _client_errors("client %s: %d %s", self.client or "?", status, message)
        self._divert = _ignore
        self._in_head = False
        self.pause_reading(_FINISHED)
        reply = _ErrorReply(self, status, message)
        receiving = self._receiving
        self._receiving = None
        if receiving is not None:
            outcome = "client_timeout" if status == 408 else "bad_request"
            if receiving is self._active:
                if not receiving.request_failed(outcome):
                    self.abort()  # part of its response is out: a cut is the only honest end
                    return
                self._active = None
            else:
                self._queue.pop()  # the one being received is always the last in line
                receiving.request_failed(outcome)
        if self._active is None:
            reply.start()
        else:
            self._queue.append(reply)

    def _after_upgrade(self, data: bytes, exc: httptools.HttpParserUpgrade) -> None:
        """After an upgrade request: a WebSocket handshake waits for the upstream's answer
        (101: a tunnel); any other protocol is not spoken here, so HTTP/1.1 goes on."""
        self._new_parser()
        offset = int(exc.args[0]) if exc.args else len(data)
        rest = data[offset:]
        request = self._request
        self._request = None
        if request is not None and self._active is not None:
            self._held = rest
            self.pause_reading(_UPGRADING)
        elif rest and not self.closed:
            self.data_received(rest)

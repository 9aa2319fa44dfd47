"""The HTTP/1.1 server side: an asyncio.Protocol over httptools, strict about framing and size.

A listener turns each request head into an `Exchange` (via its `RequestHandler`); the connection
feeds the exchange the request body and lets it write the response. Exchanges of pipelined
requests wait in line; reading pauses meanwhile so nothing is buffered without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from typing import Protocol, cast

import httptools

from cascadebreaker.sidecar.connections import ConnectionTracker, Limits
from cascadebreaker.sidecar.wire import (
    CONNECTION,
    CONTENT_LENGTH,
    END_TO_END,
    EXPECT,
    HEADER_KINDS,
    HOST,
    TRANSFER_ENCODING,
    RawHeaders,
    drop_connection_tokens,
    error_response,
    header_kind,
)

log = logging.getLogger("cascadebreaker.sidecar")

__all__ = [
    "ConnectionTracker",
    "Exchange",
    "Limits",
    "RequestHandler",
    "RequestHead",
    "ServerConnection",
]


class RequestHead:
    """A parsed request line, its end-to-end headers, and what the framing headers said.

    `headers` excludes Host, Content-Length, Transfer-Encoding, Expect, Connection and the
    headers it names, and the other hop-by-hop headers: they are re-derived when forwarding.
    """

    __slots__ = (
        "chunked",
        "client",
        "content_length",
        "expect_continue",
        "headers",
        "host",
        "http10",
        "keep_alive",
        "method",
        "target",
    )

    def __init__(self, method: bytes, target: bytes, headers: RawHeaders) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.host = b""
        self.keep_alive = True
        self.http10 = False
        self.chunked = False
        self.content_length: bytes | None = None
        self.expect_continue = False
        self.client = ""

    @property
    def has_body(self) -> bool:
        """Whether a body follows the head."""
        return self.chunked or (self.content_length is not None and self.content_length != b"0")


class Exchange(Protocol):
    """One request/response on a server connection."""

    def start(self) -> None:
        """The exchange is first in line: it may write its response."""

    def request_body(self, data: bytes) -> None:
        """A piece of the de-chunked request body."""

    def request_end(self) -> None:
        """The request body is complete."""

    def downstream_writable(self, writable: bool) -> None:
        """Backpressure from the client: stop (False) or resume (True) writing to it."""

    def connection_lost(self) -> None:
        """The client went away before the response was complete."""


class RequestHandler(Protocol):
    """What a listener does with requests."""

    def handle(self, conn: ServerConnection, request: RequestHead) -> Exchange:
        """Make the exchange that will answer `request`."""


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ServerConnection(asyncio.Protocol):
    """One client connection: parses requests and runs their exchanges in order."""

    def __init__(self, handler: RequestHandler, limits: Limits, tracker: ConnectionTracker) -> None:
        self.handler = handler
        self.limits = limits
        self._max_head_bytes = limits.max_header_bytes
        self._max_headers = limits.max_header_count
        self.tracker = tracker
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.client = ""
        self.closed = False
        self.activity = 0  # data_received calls, for the idle sweep
        self._quiet_mark = -1
        self._quiet_since = 0.0
        self._head_started = 0.0
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: RawHeaders = []
        self._head_bytes = 0
        self._in_head = False
        self._request: RequestHead | None = None
        self._active: Exchange | None = None
        self._receiving: Exchange | None = None
        self._queue: deque[Exchange] = deque()
        self._pause_reasons = 0  # bit 1: pipelining, bit 2: upstream backpressure
        self._writable = True
        self._unwritable_since = 0.0
        self._eof = False
        self._header_count = 0
        self._host = b""
        self._length: bytes | None = None
        self._encoding: bytes | None = None
        self._expect = False
        self._connection: list[bytes] = []

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register with the tracker; Nagle off."""
        # uvloop's transports do not subclass asyncio.Transport, hence a cast, not a check.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) else ""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tracker.add(self)
        if self.tracker.draining:
            transport.close()

    def data_received(self, data: bytes) -> None:
        """Parse; answer framing and size violations with 400/431 and close."""
        self.activity += 1
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._after_upgrade(data, exc)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, _BadRequest):
                self._reject(cause.status, cause.message)
            elif cause is None:
                self._reject(400, "bad request")
            else:  # a bug, not the client's fault: say so, keep serving
                log.error("error while handling a request", exc_info=cause)
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
        """The client half-closed: finish complete requests' responses, else close now."""
        if self._active is None or self._receiving is not None or self._in_head:
            return None
        self._eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        """Tell the exchanges still running."""
        self.closed = True
        self.tracker.removed(self)
        for exchange in (self._active, self._receiving, *self._queue):
            if exchange is not None:
                exchange.connection_lost()
        self._active = self._receiving = None
        self._queue.clear()

    def pause_writing(self) -> None:
        """The client reads slower than the upstream sends."""
        self._writable = False
        self._unwritable_since = self.loop.time()
        if self._active is not None:
            self._active.downstream_writable(False)

    def resume_writing(self) -> None:
        """The client caught up."""
        self._writable = True
        if self._active is not None:
            self._active.downstream_writable(True)

    # -- httptools callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        """A new request starts."""
        self._url = b""
        self._headers = []
        self._head_bytes = 0
        self._header_count = 0
        self._in_head = True
        self._head_started = self.loop.time()
        self._request = None
        self._host = b""
        self._length = None
        self._encoding = None
        self._expect = False
        if self._connection:
            self._connection = []

    def on_url(self, url: bytes) -> None:
        """Part of the request target."""
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > self._max_head_bytes:
            raise _BadRequest(431, "request header fields too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header; enforce count and size limits as they come, pick out framing."""
        self._head_bytes += len(name) + len(value) + 4
        self._header_count += 1
        if self._head_bytes > self._max_head_bytes or self._header_count > self._max_headers:
            if self._header_count > self._max_headers:
                raise _BadRequest(431, "too many request header fields")
            raise _BadRequest(431, "request header fields too large")
        kind = HEADER_KINDS.get(name)
        if kind is None:
            kind = header_kind(name)
        if kind == END_TO_END:
            self._headers.append((name, value))
        elif kind == HOST:
            self._host = value
        else:
            self._special_header(kind, value)

    def _special_header(self, kind: int, value: bytes) -> None:
        if kind == CONTENT_LENGTH:
            value = value.strip()
            if self._length is not None and value != self._length:
                raise _BadRequest(400, "conflicting content-length headers")
            self._length = value
        elif kind == TRANSFER_ENCODING:
            if self._encoding is not None:
                raise _BadRequest(400, "repeated transfer-encoding header")
            self._encoding = value.strip().lower()
        elif kind == CONNECTION:
            self._connection.append(value)
        elif kind == EXPECT:
            self._expect = value.lower() == b"100-continue"

    def on_headers_complete(self) -> None:
        """Validate framing, then hand the request to the listener's handler."""
        self._in_head = False
        parser = self._parser
        request = RequestHead(parser.get_method(), self._url, self._headers)
        if request.method == b"CONNECT":
            raise _BadRequest(405, "CONNECT is not supported")
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":
            raise _BadRequest(400, f"unsupported HTTP version {version}")
        self._framing(request)
        request.keep_alive = parser.should_keep_alive() and not self.tracker.draining
        request.http10 = version == "1.0"
        request.client = self.client
        self._request = request
        if request.expect_continue and self.transport is not None and not request.http10:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        exchange = self.handler.handle(self, request)
        self._receiving = exchange
        if self._active is None:
            self._active = exchange
            exchange.start()
        else:
            self._queue.append(exchange)

    def on_body(self, body: bytes) -> None:
        """Request body bytes go to the exchange being received."""
        if self._receiving is not None:
            self._receiving.request_body(body)

    def on_message_complete(self) -> None:
        """The request is whole; stop reading if its response must wait its turn."""
        exchange = self._receiving
        self._receiving = None
        if exchange is not None:
            exchange.request_end()
            if self._queue and exchange is self._queue[-1] and not self.closed:
                self.pause_reading(1)  # its turn comes when the responses before it are done

    # -- used by exchanges ------------------------------------------------------------------
    @property
    def writable(self) -> bool:
        """False while the client is not keeping up."""
        return self._writable

    def write(self, data: bytes) -> None:
        """Write response bytes."""
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def writelines(self, pieces: list[bytes]) -> None:
        """Write several pieces of response bytes."""
        if self.transport is not None and not self.closed:
            self.transport.writelines(pieces)

    def pause_reading(self, reason: int = 2) -> None:
        """Stop reading from the client (for a pipelined wait or upstream backpressure)."""
        if not self._pause_reasons and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._pause_reasons |= reason

    def resume_reading(self, reason: int = 2) -> None:
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
            self.resume_reading(1)
            if self._active is None and self._receiving is None:
                # Idle now: backpressure left over from the finished exchange must not stop
                # the next request from being read.
                self.resume_reading(2)

    def sweep(self, now: float, header_timeout: float, idle_timeout: float) -> None:
        """Close this connection if it idled, took too long over a request head, or stopped
        reading a response (it would hold an upstream connection for ever)."""
        if self._active is not None or self._receiving is not None:
            self._quiet_mark = -1
            if not self._writable and now - self._unwritable_since >= idle_timeout:
                log.info("client %s stopped reading its response: connection cut", self.client)
                self.abort()
        elif self._in_head:
            if now - self._head_started >= header_timeout:
                self._reject(408, "request head not received in time")
        elif self._quiet_mark != self.activity:
            self._quiet_mark = self.activity
            self._quiet_since = now
        elif now - self._quiet_since >= idle_timeout:
            self._close()

    def close_if_idle(self) -> None:
        """Close now unless a request is in progress (used when draining)."""
        if self._active is None and not self._in_head:
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
        """Answer a request the parser refused, and close (the stream cannot be resynced)."""
        if self.closed:
            return
        if self._active is None and self._receiving is None:
            self.write(error_response(status, message, close=True))
            self._close()
        else:
            self.abort()

    def _framing(self, request: RequestHead) -> None:
        """Apply the framing headers; reject smuggling-prone combinations (400)."""
        request.host = self._host
        request.expect_continue = self._expect
        if self._connection:
            request.headers = drop_connection_tokens(request.headers, self._connection)
        length = self._length
        encoding = self._encoding
        if encoding is not None:
            if length is not None:
                raise _BadRequest(400, "both content-length and transfer-encoding")
            if encoding != b"chunked":
                raise _BadRequest(400, "unsupported transfer-encoding")
            request.chunked = True
        elif length is not None:
            if not length.isdigit():
                raise _BadRequest(400, "invalid content-length")
            request.content_length = length

    def _after_upgrade(self, data: bytes, exc: httptools.HttpParserUpgrade) -> None:
        """Upgrade is hop-by-hop and not supported: serve the request as plain HTTP/1.1."""
        self._parser = httptools.HttpRequestParser(self)
        offset = int(exc.args[0]) if exc.args else len(data)
        if offset < len(data):
            self.data_received(data[offset:])

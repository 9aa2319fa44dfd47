"""One keep-alive HTTP/1.1 connection to an upstream: the callback-level exchange.

The proxy's hot path: `UpstreamPool.acquire_nowait()` / `connect()` (pool.py), then
`UpstreamConnection.send(...)` with a `ResponseSink` that receives the response as it streams.

The upstream's timeout runs from the moment the request is complete, or the upstream stops
taking its body: a client slow to send its body is never the upstream's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, Protocol, cast

import httptools

from cascadebreaker.sidecar.http.framing import (
    UNTIL_CLOSE,
    response_framing,
)
from cascadebreaker.sidecar.http.kind_cache import HEADER_KINDS
from cascadebreaker.sidecar.http.wire import (
    COMPILED,
    CONNECTION,
    CONTENT_LENGTH,
    END_TO_END,
    EXPECT,
    HOST,
    PLAIN_CONNECTION,
    TRANSFER_ENCODING,
    UPGRADE,
    RawHeaders,
    drop_connection_tokens,
    header_kind,
    plain_connection,
    unconnected,
)
from cascadebreaker.sidecar.logs import RateLimitedLog
from cascadebreaker.sidecar.upstream.model import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamReset,
    UpstreamTimeout,
)

if TYPE_CHECKING:
    from cascadebreaker.sidecar.http.tunnel import Tunnel
    from cascadebreaker.sidecar.upstream.pool import UpstreamPool

log: Final = logging.getLogger("cascadebreaker.sidecar")
# No exchange in progress: nothing for the pool's stall check to be due for.
NO_DEADLINE: Final = math.inf
# An upstream may trigger a bug at will: its log is rate-limited.
_internal_errors: Final = RateLimitedLog(log, logging.ERROR)


class ResponseSink(Protocol):
    """Receives one upstream response as it streams in (callbacks run on the event loop)."""

    # Named as a base by the sidecar's own classes (compiled, a call through this type then
    # goes native for them); no slots of its own, so theirs stay without an instance dict.
    __slots__ = ()

    def response_head(
        self,
        status: int,
        reason: bytes,
        headers: RawHeaders,
        chunked: bool,
        content_length: int | None,
    ) -> None:
        """The status line and headers arrived (`content_length` None: chunked or until close)."""

    def response_body(self, data: bytes) -> None:
        """A piece of the (de-chunked) response body."""

    def response_end(self) -> None:
        """The response is complete."""

    def response_failed(self, error: UpstreamError) -> None:
        """The exchange failed; after `response_head` this means the body was cut short."""

    def upstream_writable(self, writable: bool) -> None:
        """Backpressure on the request body: stop (False) or resume (True) sending it."""


class _HeadResponseDone(Exception):
    """Raised from the parser to stop after the head of a response to HEAD."""


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to an upstream; one exchange at a time."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        # Bound once: compiled, a method call through the object looks it up at every call.
        self._now = pool.loop.time
        self._write: Callable[[bytes], object] = unconnected
        self.closed = False
        self.reused = False
        self._new_parser()
        self._sink: ResponseSink | None = None
        self._headers: RawHeaders = []
        self._length: list[bytes] = []
        self._chunked = False
        self._connection: list[bytes] = []
        self._reason = b""
        self._head_seen = False
        self._bytes_seen = False
        self._keep_alive = True
        self._until_close = False
        self._head_request = False
        self._timeout = 0.0
        self._last_activity = 0.0
        self._watch = pool.watch
        self._reading_paused = False
        self._request_complete = True
        self._write_blocked = False  # the upstream stopped taking the request body
        self._upgrade_asked = False
        self._upgrade = b""
        self.tunnel: Tunnel | None = None

    def _new_parser(self) -> None:
        """A fresh parser, the methods called for every response bound once (compiled, a call
        through the parser object looks the method up by name each time)."""
        parser = httptools.HttpResponseParser(self)
        self._parser = parser
        self._feed: Callable[[bytes], None] = parser.feed_data
        self._status_code: Callable[[], int] = parser.get_status_code
        self._should_keep_alive: Callable[[], bool] = parser.should_keep_alive

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport; Nagle off (small heads must leave at once)."""
        # uvloop's transports do not subclass asyncio.Transport, hence a cast, not a check.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        self._write = transport.write
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not TCP
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        """Feed the response parser."""
        if self._sink is None:
            if self.tunnel is not None:
                self.tunnel.from_upstream(data)
                return
            self._abandon()  # bytes nobody asked for: the connection is unusable
            return
        self._last_activity = self._now()
        self._bytes_seen = True
        try:
            self._feed(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HeadResponseDone):
                self._new_parser()
                self._complete()
            else:
                cause = exc.__context__
                if cause is not None and not isinstance(cause, ValueError):
                    _internal_errors(
                        "error while handling a response from %s", self.pool.name, exc_info=cause
                    )
                detail = f"bad response: {cause or exc}"
                self._fail(UpstreamProtocolError(self.pool.name, detail))
        except httptools.HttpParserUpgrade as exc:
            if self.tunnel is None:
                self._fail(UpstreamProtocolError(self.pool.name, "unexpected protocol upgrade"))
                return
            offset = int(exc.args[0]) if exc.args else len(data)
            if offset < len(data):  # the first bytes of the upgraded protocol
                self.tunnel.from_upstream(data[offset:])
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(self.pool.name, f"bad response: {exc}"))

    def eof_received(self) -> bool | None:
        """A response delimited by connection close ends here."""
        if self._sink is not None and self._head_seen and self._until_close:
            self._keep_alive = False
            self._complete()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        """Fail the exchange in progress, if any, and leave the pool."""
        self.closed = True
        self.pool.discard(self)
        if self.tunnel is not None:
            tunnel, self.tunnel = self.tunnel, None
            tunnel.upstream_closed()
        if self._sink is not None:
            if self._head_seen and self._until_close:
                self._keep_alive = False
                self._complete()
            else:
                detail = "connection reset" if exc else "connection closed by upstream"
                self._fail(
                    UpstreamReset(
                        self.pool.name,
                        detail,
                        reused=self.reused,
                        response_started=self._bytes_seen,
                    )
                )

    def pause_writing(self) -> None:
        """The upstream is not taking the request body fast enough: its clock runs now."""
        self._write_blocked = True
        self._last_activity = self._now()
        if self._sink is not None:
            self._sink.upstream_writable(False)
        elif self.tunnel is not None:
            self.tunnel.upstream_writable(False)

    def resume_writing(self) -> None:
        """The upstream drained its buffer; go on sending."""
        self._write_blocked = False
        self._last_activity = self._now()
        if self._sink is not None:
            self._sink.upstream_writable(True)
        elif self.tunnel is not None:
            self.tunnel.upstream_writable(True)

    # -- httptools callbacks ----------------------------------------------------------------
    def on_status(self, reason: bytes) -> None:
        """Part of the reason phrase."""
        so_far = self._reason  # nearly always one piece: kept as is (see RequestReader.on_url)
        self._reason = so_far + reason if so_far else reason

    def on_header(self, name: bytes, value: bytes) -> None:
        """One response header: end-to-end ones are kept, framing ones noted, hop-by-hop dropped."""
        kind = header_kind(name) if COMPILED else HEADER_KINDS[name]
        if kind in (END_TO_END, HOST, EXPECT):
            self._headers.append((name, value))
        elif kind == CONTENT_LENGTH:
            self._length.append(value)
        elif kind == TRANSFER_ENCODING:
            self._chunked = b"chunked" in value.lower()
        elif kind == CONNECTION:
            if not (plain_connection(value) if COMPILED else value in PLAIN_CONNECTION):
                self._connection.append(value)
        elif kind == UPGRADE:
            self._upgrade = value

    def on_headers_complete(self) -> None:
        """Pass the head on; work out how the body is delimited."""
        status = self._status_code()
        headers = self._headers
        self._headers = []
        reason = self._reason
        self._reason = b""
        lengths = self._length
        chunked = self._chunked
        if lengths:
            self._length = []
        self._chunked = False
        if self._connection:
            headers = drop_connection_tokens(headers, self._connection)
            self._connection = []
        if status == 101 and self._upgrade_asked and self._upgrade:
            # The upstream accepted a WebSocket handshake: the sink makes the tunnel.
            headers.append((b"upgrade", self._upgrade))
            sink = self._sink
            assert sink is not None
            sink.response_head(status, reason, headers, False, None)
            return
        if status < 200:
            return  # interim (100 Continue): the sidecar answered Expect itself
        self._head_seen = True
        self._keep_alive = self._should_keep_alive()
        length, body = response_framing(status, self._head_request, lengths, chunked)
        self._until_close = body == UNTIL_CLOSE
        sink = self._sink
        assert sink is not None
        sink.response_head(status, reason, headers, chunked, length)
        if self._head_request:
            raise _HeadResponseDone

    def on_body(self, body: bytes) -> None:
        """A piece of the body."""
        if self._sink is not None:
            self._sink.response_body(body)

    def on_message_complete(self) -> None:
        """The response is whole."""
        if self._head_seen and self.tunnel is None:
            self._complete()

    # -- exchange ---------------------------------------------------------------------------
    def send(
        self,
        head: bytes,
        sink: ResponseSink,
        timeout: float,
        head_request: bool = False,
        body: bytes = b"",
        complete: bool = True,
        upgrade: bool = False,
    ) -> None:
        """Start an exchange: write the request head (and a whole body, if given).

        `complete=False` says more request body follows (`write`, then `end_request`);
        `upgrade=True` says the head asks for a WebSocket (a 101 reaches the sink).
        """
        assert self.transport is not None
        assert self._sink is None
        self._sink = sink
        self._request_complete = complete
        self._upgrade_asked = upgrade
        if upgrade:
            self._upgrade = b""
        self._head_seen = False
        self._bytes_seen = False
        self._head_request = head_request
        self._timeout = timeout
        now = self._now()
        self._last_activity = now
        watch = self._watch  # it checks every connection of the pool with a sink
        if now + timeout < watch.due:  # none armed, or this one may be due first
            watch.arm(now + timeout)
        if body:
            self.transport.writelines((head, body))
        else:
            self._write(head)

    def write(self, data: bytes) -> None:
        """Send more of the request body (already framed by the caller), or tunnel bytes."""
        if self.transport is not None and not self.closed:
            self._write(data)

    def writelines(self, pieces: Iterable[bytes]) -> None:
        """Send several pieces of the request body."""
        if self.transport is not None and not self.closed:
            self.transport.writelines(pieces)

    def end_request(self) -> None:
        """The whole request body has been written: the upstream's clock starts."""
        self._request_complete = True
        self._last_activity = self._now()

    def start_tunnel(self, tunnel: Tunnel) -> None:
        """After a 101: bytes pass untouched; no timeout, never back in the pool."""
        self.tunnel = tunnel
        self._sink = None
        self._head_seen = False

    def pause_reading(self) -> None:
        """Stop reading the response (the client is slow); the timeout does not run meanwhile."""
        if self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read the response again."""
        if self.transport is not None and self._reading_paused:
            self._reading_paused = False
            self._last_activity = self._now()
            self.transport.resume_reading()

    def abort(self) -> None:
        """Drop the exchange (the client went away): close without notifying the sink."""
        self._sink = None
        self._abandon()

    def close(self) -> None:
        """Close an idle connection."""
        self._abandon()

    # -- internals --------------------------------------------------------------------------
    def check_timeout(self, now: float) -> float:
        """Called by the pool's watch: fail the exchange if the upstream stalled too long.

        The exchange's deadline (loop time) while it is still in progress afterwards, else
        `NO_DEADLINE` (the watch checks again by the earliest deadline of the pool's).
        """
        if self._sink is None:
            return NO_DEADLINE
        if self._reading_paused or (
            not self._request_complete and not self._write_blocked and not self._head_seen
        ):
            # The client is slow reading the response or sending the body: not the upstream.
            self._last_activity = now
            return now + self._timeout
        deadline = self._last_activity + self._timeout
        if now < deadline:
            return deadline
        what = "response body stalled" if self._head_seen else "no response"
        self._fail(
            UpstreamTimeout(
                self.pool.name,
                f"{what} within {self._timeout:g}s",
                response_started=self._bytes_seen,
            )
        )
        return NO_DEADLINE

    def _complete(self) -> None:
        sink = self._sink
        self._sink = None
        # An upstream may answer before reading the whole request body; the rest was never
        # sent, so the connection is out of step and must not be reused.
        if self._keep_alive and self._request_complete and not self.closed:
            self.reused = True
            if self._reading_paused:
                # Paused for a slow client while the last bytes were parsed: the next exchange
                # on this connection must be able to read its response.
                self._reading_paused = False
                assert self.transport is not None
                self.transport.resume_reading()
            self.pool.release(self)
        else:
            self._abandon()
        if sink is not None:
            sink.response_end()

    def _fail(self, error: UpstreamError) -> None:
        sink = self._sink
        self._sink = None
        self._abandon()
        if sink is not None:
            sink.response_failed(error)

    def _abandon(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.discard(self)
            if self.transport is not None:
                self.transport.close()

"""Requests out of bytes: the httptools callbacks of a server connection, sans I/O.

`RequestReader` is the parsing half of `ServerConnection` (connection.py adds the transport,
the queue of exchanges and the clocks): it bounds the head (size, header count), picks out the
framing headers, asks framing.py how the body is delimited (refusing what could be read two
ways), and hands the connection a complete `RequestHead`, then the body's pieces, then its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import httptools

from cascadebreaker.sidecar.http.exchange import RequestHead
from cascadebreaker.sidecar.http.framing import (
    CHUNKED,
    FramingError,
    request_framing,
    upgrade_requested,
)
from cascadebreaker.sidecar.http.kind_cache import HEADER_KINDS
from cascadebreaker.sidecar.http.limits import Limits
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
)

if TYPE_CHECKING:
    from cascadebreaker.sidecar.http.limits import ConnectionTracker

__all__ = ["BadRequest", "RequestReader"]


class BadRequest(FramingError):
    """A request refused for its head (size, method, version): `status`, then close."""


class RequestReader:
    """Parser state and callbacks; the connection implements the three steps at the end."""

    # Provided by the connection.
    tracker: ConnectionTracker
    client: str
    loop: asyncio.AbstractEventLoop
    _now: Callable[[], float]  # the loop's clock, bound once

    def __init__(self, limits: Limits) -> None:
        self._max_head_bytes = limits.max_header_bytes
        self._max_headers = limits.max_header_count
        self._head_started = 0.0
        self._new_parser()
        self._url = b""
        self._headers: RawHeaders = []
        self._head_bytes = 0
        self._in_head = False
        # A WebSocket handshake's head, until the parser stops at its upgrade.
        self._request: RequestHead | None = None
        self._header_count = 0
        self._host = b""
        # A header other than Host that the head's framing or version depends on was read:
        # the fields below are set. Most requests have none, and one flag read is all they
        # cost (their path touches less code and data).
        self._special = False
        self._lengths: list[bytes] | None = None  # every Content-Length value received
        self._encodings: list[bytes] | None = None  # every Transfer-Encoding value received
        self._expect = False
        self._upgrade: bytes | None = None
        self._connection: list[bytes] = []
        # A Connection-like header was read: only then can a kept-alive request be HTTP/1.0.
        self._version_unsure = False

    # -- httptools callbacks ----------------------------------------------------------------
    def _new_parser(self) -> None:
        """A fresh parser, the methods called for every request bound once (compiled, a call
        through the parser object looks the method up by name each time)."""
        parser = httptools.HttpRequestParser(self)
        self._parser = parser
        self._feed: Callable[[bytes], None] = parser.feed_data
        self._get_method: Callable[[], bytes] = parser.get_method
        self._should_keep_alive: Callable[[], bool] = parser.should_keep_alive

    def on_message_begin(self) -> None:
        """A new request starts."""
        self._url = b""
        self._headers = []
        self._head_bytes = 0
        self._header_count = 0
        self._in_head = True
        self._head_started = self._now()
        self._host = b""
        if self._special:
            self._special = False
            self._request = None
            self._lengths = None
            self._encodings = None
            self._expect = False
            self._upgrade = None
            self._version_unsure = False
            if self._connection:
                self._connection = []

    def on_url(self, url: bytes) -> None:
        """Part of the request target."""
        # Nearly always the whole target in one piece: kept as is (compiled, `+=` is the
        # interpreter's generic in-place add, and its code, for every request).
        so_far = self._url
        self._url = so_far + url if so_far else url
        self._head_bytes += len(url)
        if self._head_bytes > self._max_head_bytes:
            raise BadRequest("request header fields too large", 431)

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header; enforce count and size limits as they come, pick out framing."""
        self._head_bytes += len(name) + len(value) + 4
        self._header_count += 1
        if self._head_bytes > self._max_head_bytes or self._header_count > self._max_headers:
            if self._header_count > self._max_headers:
                raise BadRequest("too many request header fields", 431)
            raise BadRequest("request header fields too large", 431)
        kind = header_kind(name) if COMPILED else HEADER_KINDS[name]
        if kind == END_TO_END:
            self._headers.append((name, value))
        elif kind == HOST:
            self._host = value
        else:
            self._special_header(kind, value)

    def _special_header(self, kind: int, value: bytes) -> None:
        self._special = True
        if kind == CONTENT_LENGTH:
            if self._lengths is None:
                self._lengths = [value]
            else:
                self._lengths.append(value)
        elif kind == TRANSFER_ENCODING:
            if self._encodings is None:
                self._encodings = [value]
            else:
                self._encodings.append(value)
        elif kind == CONNECTION:
            self._version_unsure = True
            if not (plain_connection(value) if COMPILED else value in PLAIN_CONNECTION):
                self._connection.append(value)
        elif kind == EXPECT:
            self._expect = value.lower() == b"100-continue"
        elif kind == UPGRADE:
            self._upgrade = value
        else:  # HOP: llhttp reads Proxy-Connection as Connection (a keep-alive token counts)
            self._version_unsure = True

    def on_headers_complete(self) -> None:
        """Validate framing, then hand the request to the listener's handler."""
        self._in_head = False
        request = RequestHead(self._get_method(), self._url, self._headers)
        if request.method == b"CONNECT":
            raise BadRequest("CONNECT is not supported", 405)
        keep_alive = self._should_keep_alive()
        request.host = self._host
        request.client = self.client
        # llhttp keeps a request's connection without a (Proxy-)Connection keep-alive token
        # only for HTTP/1.1 (the one version with major and minor above 0 it accepts): such a
        # request, with no framing header, is HTTP/1.1 with no body (RequestHead's defaults).
        if self._special or not keep_alive:
            self._special_head(request, keep_alive)
        request.keep_alive = keep_alive and not self.tracker.draining
        self._head_received(request)

    def _special_head(self, request: RequestHead, keep_alive: bool) -> None:
        """The version (costly to ask for: a str is formatted), framing and the other special
        headers of a request that has some, or that closes its connection."""
        if not keep_alive or self._version_unsure:
            version = self._parser.get_http_version()
            if version != "1.1" and version != "1.0":
                raise BadRequest(f"unsupported HTTP version {version}")
            request.http10 = version == "1.0"
        upgrade = self._upgrade is not None and upgrade_requested(self._connection, self._upgrade)
        if self._lengths is not None or self._encodings is not None:
            length = request_framing(self._lengths, self._encodings, upgrade)
            request.chunked = length == CHUNKED
            request.content_length = None if request.chunked else length
        request.expect_continue = self._expect
        if self._connection:
            request.headers = drop_connection_tokens(request.headers, self._connection)
        if upgrade and not request.http10 and b"websocket" in (self._upgrade or b"").lower():
            # A WebSocket handshake: its Upgrade header is forwarded, and a 101 answer turns
            # the connection into a tunnel. Other protocols are not spoken: HTTP/1.1 goes on.
            request.upgrade = self._upgrade or b""
            self._request = request

    def on_body(self, body: bytes) -> None:
        """Request body bytes (de-chunked)."""
        self._body_received(body)

    def on_message_complete(self) -> None:
        """The request is whole."""
        self._request_complete()

    # -- what the connection does with what was read -------------------------------------------
    def _head_received(self, request: RequestHead) -> None:
        raise NotImplementedError

    def _body_received(self, data: bytes) -> None:
        raise NotImplementedError

    def _request_complete(self) -> None:
        raise NotImplementedError

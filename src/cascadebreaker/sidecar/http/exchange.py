"""What a server connection and a listener say to each other: the parsed request head, the
exchange that answers it, and the far end of a tunnel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from cascadebreaker.sidecar.http.wire import RawHeaders

if TYPE_CHECKING:
    from cascadebreaker.sidecar.http.connection import ServerConnection

__all__ = ["Exchange", "RequestHandler", "RequestHead", "TunnelEnd"]


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
        "upgrade",
    )

    def __init__(self, method: bytes, target: bytes, headers: RawHeaders) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.host = b""
        self.keep_alive = True
        self.http10 = False
        self.chunked = False
        self.content_length: int | None = None  # None: no Content-Length (or chunked)
        self.expect_continue = False
        self.client = ""
        # The Upgrade header of a WebSocket handshake (empty otherwise): forwarded, and a 101
        # answer turns the connection into a tunnel.
        self.upgrade = b""

    @property
    def has_body(self) -> bool:
        """Whether a body follows the head."""
        return self.chunked or bool(self.content_length)


class Exchange(Protocol):
    """One request/response on a server connection."""

    # Named as a base by the sidecar's own classes (compiled, a call through this type then
    # goes native for them); no slots of its own, so theirs stay without an instance dict.
    __slots__ = ()

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

    def request_failed(self, outcome: str) -> bool:
        """The request cannot be completed (`outcome`: the client stalled, `client_timeout`, or
        sent a malformed body, `bad_request`): drop any upstream work without blaming the
        upstream. True when no byte of the response was written yet (an error reply may
        follow), False when the connection must be cut."""


class TunnelEnd(Protocol):
    """What a client connection turned tunnel talks to (the upstream's side)."""

    def from_client(self, data: bytes) -> None:
        """Bytes from the client, for the upstream."""

    def client_writable(self, writable: bool) -> None:
        """Backpressure from the client."""

    def client_closed(self) -> None:
        """The client connection is gone."""


class RequestHandler(Protocol):
    """What a listener does with requests."""

    __slots__ = ()  # as Exchange's

    def handle(self, conn: ServerConnection, request: RequestHead) -> Exchange:
        """Make the exchange that will answer `request`."""

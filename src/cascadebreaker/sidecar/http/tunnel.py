"""A WebSocket the upstream accepted (101): the client and upstream connections joined as a pipe.

Bytes pass untouched both ways with backpressure; when either side closes, the other closes
after what was already written. The upstream connection never returns to its pool; the client
connection is closed after `limits.tunnel_idle_timeout` without a byte either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cascadebreaker.sidecar.http.connection import ServerConnection

__all__ = ["Tunnel", "UpstreamEnd"]


class UpstreamEnd(Protocol):
    """The upstream's side of a tunnel (an upstream connection after its 101)."""

    def write(self, data: bytes) -> None:
        """Bytes for the upstream."""

    def pause_reading(self) -> None:
        """Stop reading the upstream."""

    def resume_reading(self) -> None:
        """Read the upstream again."""

    def close(self) -> None:
        """Close after what was written."""


class Tunnel:
    """The two ends of an upgraded connection."""

    __slots__ = ("client", "upstream")

    def __init__(self, client: ServerConnection, upstream: UpstreamEnd) -> None:
        self.client = client
        self.upstream = upstream

    # -- the client's side ------------------------------------------------------------------
    def from_client(self, data: bytes) -> None:
        """Bytes from the client go to the upstream."""
        self.upstream.write(data)

    def client_writable(self, writable: bool) -> None:
        """Stop reading the upstream while the client does not keep up."""
        if writable:
            self.upstream.resume_reading()
        else:
            self.upstream.pause_reading()

    def client_closed(self) -> None:
        """The client is gone: close the upstream side."""
        self.upstream.close()

    # -- the upstream's side ----------------------------------------------------------------
    def from_upstream(self, data: bytes) -> None:
        """Bytes from the upstream go to the client (and count as activity)."""
        self.client.activity += 1
        self.client.write(data)

    def upstream_writable(self, writable: bool) -> None:
        """Stop reading the client while the upstream does not keep up."""
        if writable:
            self.client.resume_reading()
        else:
            self.client.pause_reading()

    def upstream_closed(self) -> None:
        """The upstream is gone: close the client side."""
        self.client.close()

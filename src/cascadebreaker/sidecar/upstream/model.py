"""What the upstream layer talks about: targets, whole responses, and the error tree.

UpstreamError                 the call failed before a complete response (502 by default)
 ├── UpstreamConnectError     could not connect (refused, unreachable)
 ├── UpstreamTimeout          no response head / no next read within the timeout (504)
 ├── UpstreamReset            connection closed or reset mid-exchange
 └── UpstreamProtocolError    the upstream sent bytes that are not HTTP/1.1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import urlsplit


class UpstreamError(Exception):
    """A call to an upstream failed before a complete response arrived."""

    # ClassVar: compiled by mypyc, a plain class attribute would become an instance attribute
    # that the subclasses' values never reach (reading it raised AttributeError).
    status: ClassVar[int] = 502
    kind: ClassVar[str] = "error"

    def __init__(
        self, upstream: str, detail: str, *, reused: bool = False, response_started: bool = False
    ) -> None:
        super().__init__(f"{upstream}: {detail}")
        self.upstream = upstream
        self.detail = detail
        # A reset on a reused keep-alive connection before any response byte is the classic
        # "server closed an idle connection" race: safe to replay a body-less request.
        self.reused = reused
        self.response_started = response_started


class UpstreamConnectError(UpstreamError):
    """The upstream could not be connected to (refused, unreachable, connect timeout)."""

    kind = "connect"


class UpstreamTimeout(UpstreamError):
    """The upstream sent no response head, or no next read, within its timeout."""

    status = 504
    kind = "timeout"


class UpstreamReset(UpstreamError):
    """The connection was closed or reset in the middle of an exchange."""

    kind = "reset"


class UpstreamProtocolError(UpstreamError):
    """The upstream's reply is not valid HTTP/1.1."""

    kind = "protocol"


@dataclass(frozen=True, slots=True)
class UpstreamTarget:
    """Where an upstream lives and how long to wait for it."""

    name: str
    host: str
    port: int
    base_path: bytes = b""
    authority: bytes = b""
    timeout: float = 10.0
    connect_timeout: float = 10.0
    max_idle: int = 64

    @classmethod
    def from_url(
        cls,
        name: str,
        url: str,
        timeout: float = 10.0,
        connect_timeout: float | None = None,
        max_idle: int = 64,
        host_header: str | None = None,
    ) -> UpstreamTarget:
        """Build a target from `http://host:port[/base]`."""
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or 80
        authority = host_header or parts.netloc
        return cls(
            name=name,
            host=host,
            port=port,
            base_path=parts.path.rstrip("/").encode(),
            authority=authority.encode(),
            timeout=timeout,
            connect_timeout=connect_timeout or timeout,
            max_idle=max_idle,
        )


@dataclass(slots=True)
class UpstreamResponse:
    """A whole upstream response (headers are end-to-end only; names lower-cased)."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

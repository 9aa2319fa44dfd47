"""Client connection bookkeeping: per-request limits, idle and header timeouts, draining."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cascadebreaker.sidecar.http_server import ServerConnection


class Limits:
    """Per-request bounds."""

    __slots__ = ("max_header_bytes", "max_header_count")

    def __init__(self, max_header_bytes: int = 32768, max_header_count: int = 100) -> None:
        self.max_header_bytes = max_header_bytes
        self.max_header_count = max_header_count


class ConnectionTracker:
    """The open client connections: idle and header timeouts, draining at shutdown.

    A sweep every `tick` seconds closes connections idle longer than `idle_timeout` and answers
    408 to heads unfinished after `header_timeout` (slow clients); nothing runs per request.
    """

    def __init__(self, header_timeout: float = 30.0, idle_timeout: float = 75.0) -> None:
        self.connections: set[ServerConnection] = set()
        self.draining = False
        self.idle_event = asyncio.Event()
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.tick = max(0.05, min(1.0, min(header_timeout, idle_timeout) / 10))
        self._sweeper: asyncio.TimerHandle | None = None

    def add(self, conn: ServerConnection) -> None:
        """A connection opened."""
        self.connections.add(conn)
        if self._sweeper is None:
            self._sweeper = conn.loop.call_later(self.tick, self._sweep, conn.loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._sweeper = None
        now = loop.time()
        for conn in list(self.connections):
            conn.sweep(now, self.header_timeout, self.idle_timeout)
        if self.connections:
            self._sweeper = loop.call_later(self.tick, self._sweep, loop)

    def drain(self) -> None:
        """Stop keep-alive: idle connections close now, busy ones after their response."""
        self.draining = True
        for conn in list(self.connections):
            conn.close_if_idle()
        if not self.connections:
            self.idle_event.set()

    def abort_all(self) -> None:
        """Grace is over: cut every connection still open."""
        for conn in list(self.connections):
            conn.abort()

    def removed(self, conn: ServerConnection) -> None:
        """A connection closed."""
        self.connections.discard(conn)
        if not self.connections and self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self.draining and not self.connections:
            self.idle_event.set()

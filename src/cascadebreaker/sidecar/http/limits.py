"""Client connection bookkeeping: per-request limits, timeouts, a connection cap, draining."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cascadebreaker.sidecar.http.connection import ServerConnection


class Limits:
    """Per-request bounds."""

    __slots__ = ("max_header_bytes", "max_header_count")

    def __init__(self, max_header_bytes: int = 32768, max_header_count: int = 100) -> None:
        self.max_header_bytes = max_header_bytes
        self.max_header_count = max_header_count


class ConnectionTracker:
    """The open client connections of some listeners: timeouts, a cap, draining at shutdown.

    A sweep every `tick` seconds closes connections idle longer than `idle_timeout`, answers
    408 to heads unfinished after `header_timeout` and to bodies slower than `body_timeout` /
    `min_body_rate` (slow clients), and closes tunnels idle for `tunnel_idle_timeout`; nothing
    runs per request. Past `max_connections` open connections, new ones get a 503 and close.
    """

    def __init__(
        self,
        header_timeout: float = 30.0,
        idle_timeout: float = 75.0,
        *,
        body_timeout: float = 30.0,
        min_body_rate: float = 1024.0,
        tunnel_idle_timeout: float = 300.0,
        max_connections: int | None = None,
    ) -> None:
        self.connections: set[ServerConnection] = set()
        self.draining = False
        self.idle_event = asyncio.Event()
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.body_timeout = body_timeout
        self.min_body_rate = min_body_rate
        self.tunnel_idle_timeout = tunnel_idle_timeout
        self.max_connections = max_connections
        self.refused = 0  # connections turned away at the cap
        shortest = min(header_timeout, idle_timeout, body_timeout)
        self.tick = max(0.05, min(1.0, shortest / 10))
        self._sweeper: asyncio.TimerHandle | None = None

    def add(self, conn: ServerConnection) -> bool:
        """A connection opened; False when it is over the cap (it must be refused)."""
        if self.max_connections is not None and len(self.connections) >= self.max_connections:
            self.refused += 1
            return False
        self.connections.add(conn)
        if self._sweeper is None:
            self._sweeper = conn.loop.call_later(self.tick, self._sweep, conn.loop)
        return True

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._sweeper = None
        now = loop.time()
        for conn in list(self.connections):
            conn.sweep(now)
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

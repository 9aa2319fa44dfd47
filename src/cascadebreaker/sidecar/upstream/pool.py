"""Idle keep-alive connections to one upstream, and the one periodic check of their stalls."""

from __future__ import annotations

import asyncio
import contextlib

from cascadebreaker.sidecar.upstream.connection import UpstreamConnection
from cascadebreaker.sidecar.upstream.model import (
    UpstreamConnectError,
    UpstreamTarget,
    UpstreamTimeout,
)

__all__ = ["TimeoutWatch", "UpstreamPool"]


class TimeoutWatch:
    """Checks a pool's busy connections for stalls every `resolution` seconds.

    One periodic check per pool instead of a timer armed and cancelled per request (which costs
    more than the rest of the exchange's bookkeeping); timeouts fire up to `resolution` late.
    The check walks every open connection of the pool, idle ones too, so that starting and
    ending an exchange costs no bookkeeping here beyond arming the check when it sleeps.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        resolution: float,
        connections: set[UpstreamConnection],
    ) -> None:
        self.loop = loop
        self.resolution = resolution
        self.connections = connections  # the pool's open connections (not a copy)
        self.handle: asyncio.TimerHandle | None = None  # the next check, while any is busy

    def arm(self) -> None:
        """Schedule the next check (an exchange starts while none is scheduled)."""
        self.handle = self.loop.call_later(self.resolution, self._tick)

    def _tick(self) -> None:
        self.handle = None
        now = self.loop.time()
        busy = False
        # A copy: failing a stalled exchange closes its connection, which leaves the set.
        for conn in list(self.connections):
            if conn.check_timeout(now):
                busy = True
        # A failure's retry may have started an exchange, and armed the check, meanwhile.
        if busy and self.handle is None:
            self.arm()

    def close(self) -> None:
        """Stop checking."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class UpstreamPool:
    """Idle keep-alive connections to one upstream (most recently used first)."""

    def __init__(self, target: UpstreamTarget, loop: asyncio.AbstractEventLoop) -> None:
        self.target = target
        self.name = target.name
        self.loop = loop
        self._idle: list[UpstreamConnection] = []
        self._all: set[UpstreamConnection] = set()
        self.watch = TimeoutWatch(loop, max(0.005, min(0.05, target.timeout / 20)), self._all)

    @property
    def idle_count(self) -> int:
        """Connections waiting for their next exchange."""
        return len(self._idle)

    @property
    def open_count(self) -> int:
        """All open connections, busy or idle."""
        return len(self._all)

    def acquire_nowait(self) -> UpstreamConnection | None:
        """An idle connection, or None when a new one must be made with `connect()`."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    async def connect(self) -> UpstreamConnection:
        """Open a new connection (raises UpstreamConnectError / UpstreamTimeout)."""
        target = self.target
        try:
            async with asyncio.timeout(target.connect_timeout):
                _, conn = await self.loop.create_connection(
                    lambda: UpstreamConnection(self), target.host, target.port
                )
        except TimeoutError:
            raise UpstreamTimeout(
                self.name, f"connect timed out after {target.connect_timeout:g}s"
            ) from None
        except OSError as exc:
            raise UpstreamConnectError(self.name, exc.strerror or str(exc)) from None
        self._all.add(conn)
        return conn

    async def acquire(self) -> UpstreamConnection:
        """An idle connection, or a new one."""
        return self.acquire_nowait() or await self.connect()

    def release(self, conn: UpstreamConnection) -> None:
        """Return a connection whose exchange completed cleanly."""
        if len(self._idle) < self.target.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    def discard(self, conn: UpstreamConnection) -> None:
        """Forget a closed connection."""
        self._all.discard(conn)
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)

    def close(self) -> None:
        """Close every connection (idle and busy)."""
        for conn in list(self._all):
            conn.close()
        self._idle.clear()
        self.watch.close()

"""Idle keep-alive connections to one upstream, and the one periodic check of their stalls."""

from __future__ import annotations

import asyncio
import contextlib

from cascadebreaker.sidecar.upstream.connection import NO_DEADLINE, UpstreamConnection
from cascadebreaker.sidecar.upstream.model import (
    UpstreamConnectError,
    UpstreamTarget,
    UpstreamTimeout,
)

__all__ = ["TimeoutWatch", "UpstreamPool"]


class TimeoutWatch:
    """Checks a pool's busy connections for stalls when the earliest of them can be due.

    No timer per request (arming and cancelling one costs more than the rest of the exchange's
    bookkeeping): an exchange that starts arms the check only when it would be due before the
    check armed, or none is. The check walks every open connection of the pool, idle ones too,
    fails the stalled ones, and arms itself for the earliest deadline left, never sooner than
    `resolution` from now (the most a timeout fires late). Under steady load it runs about
    once per timeout, not once per `resolution`: a periodic check woke the sidecar 20 times
    a second for nothing (each wake-up from cold caches).
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
        self.due = NO_DEADLINE  # the loop time the armed check runs at (none armed: inf)

    def arm(self, deadline: float) -> None:
        """Check at `deadline` (loop time), or `resolution` from now if that is later: an
        exchange starts that may be due before the check armed (`due`), or a check found one."""
        if self.handle is not None:
            self.handle.cancel()
        self.due = max(deadline, self.loop.time() + self.resolution)
        self.handle = self.loop.call_at(self.due, self._tick)

    def _tick(self) -> None:
        self.handle = None
        self.due = NO_DEADLINE
        now = self.loop.time()
        earliest = NO_DEADLINE
        # A copy: failing a stalled exchange closes its connection, which leaves the set.
        for conn in list(self.connections):
            deadline = conn.check_timeout(now)
            if deadline < earliest:
                earliest = deadline
        # A failure's retry may have started an exchange, and armed the check, meanwhile.
        if earliest < self.due:
            self.arm(earliest)

    def close(self) -> None:
        """Stop checking."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        self.due = NO_DEADLINE


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

"""Availability updates over Redis pub/sub: every replica of every service hears them.

One channel per namespace, `ccb:cascade:<namespace>`; messages are the update's JSON wire form
(signed like on the Watch stream). A sidecar ignores its own messages (by an instance id
prefix) and updates about its own service (each replica derives those from its own breakers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from cascadebreaker.cascade import AvailabilityUpdate, MalformedUpdate

__all__ = ["RedisBus", "channel_name"]

log = logging.getLogger("cascadebreaker.sidecar.cascade")

_SEPARATOR = b"|"
_BACKOFF_MAX = 2.0


def channel_name(namespace: str) -> str:
    """The pub/sub channel of a namespace."""
    return f"ccb:cascade:{namespace}"


class RedisBus:
    """Publishes our updates and feeds everyone else's to `receive`; reconnects on its own."""

    def __init__(
        self,
        url: str,
        namespace: str,
        receive: Callable[[AvailabilityUpdate], None],
        on_malformed: Callable[[], None],
    ) -> None:
        import redis.asyncio as aioredis  # the redis extra

        self.channel = channel_name(namespace)
        # A cluster broadcasts every PUBLISH to every node: one node (the seed) carries the bus.
        if url.startswith("redis+cluster://"):
            url = "redis://" + url.removeprefix("redis+cluster://")
        self._client: Any = aioredis.Redis.from_url(url, socket_timeout=5.0)
        self._receive = receive
        self._on_malformed = on_malformed
        # Tells our own messages apart (the channel echoes them back to us).
        self._me = f"{os.getpid()}-{id(self):x}".encode()
        self._task: asyncio.Task[None] | None = None
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue(maxsize=10_000)
        self._sender: asyncio.Task[None] | None = None
        self.connected = False
        self.published = 0
        self.dropped = 0

    def start(self) -> None:
        """Start listening and publishing (inside the running loop)."""
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._listen())
        self._sender = loop.create_task(self._send())

    def publish(self, updates: Iterable[AvailabilityUpdate]) -> None:
        """Queue updates for the channel (never blocks the caller; drops when Redis is away)."""
        for update in updates:
            try:
                self._outbox.put_nowait(self._me + _SEPARATOR + update.to_json())
            except asyncio.QueueFull:
                self.dropped += 1

    async def _send(self) -> None:
        while True:
            message = await self._outbox.get()
            try:
                await self._client.publish(self.channel, message)
                self.published += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.dropped += 1  # Watch streams and expiry still cover it
                log.debug("redis publish failed: %s", exc)

    async def _listen(self) -> None:
        delay = 0.05
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                self.connected = True
                delay = 0.05
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._deliver(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("redis subscription lost: %s", exc)
            finally:
                self.connected = False
                await _quietly(pubsub.aclose())
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)

    def _deliver(self, data: bytes) -> None:
        sender, sep, payload = data.partition(_SEPARATOR)
        if not sep:
            self._on_malformed()
            return
        if sender == self._me:
            return
        try:
            update = AvailabilityUpdate.from_json(payload)
        except MalformedUpdate:
            self._on_malformed()
            return
        self._receive(update)

    def close(self) -> None:
        """Stop both tasks; the connection closes with the loop."""
        for task in (self._task, self._sender):
            if task is not None:
                task.cancel()


async def _quietly(awaitable: Any) -> None:
    # Closing a broken connection may fail; there is nothing left to do then.
    with contextlib.suppress(Exception):
        await awaitable

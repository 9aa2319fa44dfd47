"""Availability updates over core NATS: one subject per service, heard only by its dependents.

Subjects (`<ns>` the cascade namespace, `<service>` with `.` written `~`, a NATS token
separator):

    ccb.cascade.<ns>.u.<service>     updates about <service>'s endpoints (the JSON wire form,
                                     signed like on every bus)
    ccb.cascade.<ns>.sync.<service>  "send me your current state since version V": every
                                     sidecar of <service> answers on the reply subject

A sidecar subscribes to the subjects of its upstreams (what it depends on) and of its own
service (its siblings' reports, which it answers when it can serve them): NATS delivers a change
to the dependents of the service that changed, not to the fleet. Its own messages never come
back (`no_echo`). Core NATS keeps nothing, so after every (re)connection the bus asks each
upstream's sidecars for what it missed: a version is the sender's wall clock in microseconds,
so "since the disconnection, less the allowed clock skew" covers every update sent meanwhile,
recoveries included (the table drops duplicates).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from cascadebreaker.cascade import AvailabilityUpdate, MalformedUpdate

__all__ = ["NatsBus", "subject"]

log = logging.getLogger("cascadebreaker.sidecar.cascade")

_BACKOFF_MAX = 2.0
_OUTBOX = 10_000


def _token(service: str) -> str:
    return service.replace(".", "~")


def subject(namespace: str, kind: str, service: str) -> str:
    """The subject of `service`'s updates (`kind="u"`) or of its sync requests (`"sync"`)."""
    return f"ccb.cascade.{namespace}.{kind}.{_token(service)}"


class NatsBus:
    """Publishes our updates on our service's subject; hears our upstreams' and siblings'."""

    def __init__(
        self,
        url: str,
        namespace: str,
        service: str,
        upstreams: Iterable[str],
        current: Callable[[int], list[AvailabilityUpdate]],
        receive: Callable[[AvailabilityUpdate], None],
        on_malformed: Callable[[], None],
        max_skew: float = 60.0,
    ) -> None:
        self.url = url
        self.namespace = namespace
        self.service = service
        self.upstreams = sorted(set(upstreams) - {service})
        self._current = current
        self._receive = receive
        self._on_malformed = on_malformed
        self._max_skew = max_skew
        self._nc: Any = None
        self._task: asyncio.Task[None] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._outbox: asyncio.Queue[AvailabilityUpdate] = asyncio.Queue(maxsize=_OUTBOX)
        self._lost_at: float | None = None  # wall time the connection went away
        self.connected = False
        self.published = 0
        self.dropped = 0
        self.received = 0
        self.reconnects = 0
        self.syncs_answered = 0

    def start(self) -> None:
        """Connect (retrying until it works) and start publishing (inside the running loop)."""
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._connect())
        self._sender = loop.create_task(self._send())

    def publish(self, updates: Iterable[AvailabilityUpdate]) -> None:
        """Queue updates (never blocks; drops when the outbox is full)."""
        for update in updates:
            try:
                self._outbox.put_nowait(update)
            except asyncio.QueueFull:
                self.dropped += 1

    async def _connect(self) -> None:
        import nats  # the nats extra

        delay = 0.05
        while True:
            try:
                self._nc = await nats.connect(
                    self.url,
                    name=f"ccb-{self.service}",
                    no_echo=True,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,  # forever: the bus outlives any NATS outage
                    reconnect_time_wait=0.25,
                    connect_timeout=2,
                    disconnected_cb=self._disconnected,
                    reconnected_cb=self._reconnected,
                    error_cb=self._error,
                )
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # first connection refused: keep trying
                log.debug("nats connect %s failed: %s", self.url, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX)
        nc = self._nc
        for name in (*self.upstreams, self.service):
            await nc.subscribe(subject(self.namespace, "u", name), cb=self._on_update)
        await nc.subscribe(subject(self.namespace, "sync", self.service), cb=self._on_sync)
        self._inbox = nc.new_inbox()
        await nc.subscribe(self._inbox, cb=self._on_update)
        self.connected = True
        # Since version 1, not 0: the last update of every endpoint, available ones too (a
        # healthy sibling's answer to a sick one is what keeps the endpoint served).
        await self._ask_for_missed(1)

    async def _disconnected(self) -> None:
        self.connected = False
        if self._lost_at is None:
            self._lost_at = time.time()

    async def _reconnected(self) -> None:
        self.connected = True
        self.reconnects += 1
        lost_at, self._lost_at = self._lost_at, None
        since = 1 if lost_at is None else int((lost_at - self._max_skew) * 1_000_000)
        await self._ask_for_missed(max(since, 1))
        # A dependent that came back first asked us while we were away (no responder): what we
        # published during the outage goes out again now, to whoever is listening.
        for update in self._current(max(since, 1)):
            with contextlib.suppress(Exception):
                await self._nc.publish(
                    subject(self.namespace, "u", update.service), update.to_json()
                )

    async def _error(self, exc: Exception) -> None:
        log.debug("nats: %s", exc)

    async def _ask_for_missed(self, since: int) -> None:
        """Ask every upstream's sidecars for their updates newer than `since`."""
        body = json.dumps({"since": since}).encode()
        for name in self.upstreams:
            with contextlib.suppress(Exception):  # not connected: the next reconnect asks again
                await self._nc.publish(
                    subject(self.namespace, "sync", name), body, reply=self._inbox
                )

    async def _on_sync(self, msg: Any) -> None:
        """A dependent asks for our state: send it to its inbox."""
        if not msg.reply:
            return
        try:
            since = int(json.loads(msg.data)["since"])
        except (ValueError, KeyError, TypeError):
            self._on_malformed()
            return
        self.syncs_answered += 1
        for update in self._current(max(since, 1)):
            with contextlib.suppress(Exception):
                await self._nc.publish(msg.reply, update.to_json())

    async def _on_update(self, msg: Any) -> None:
        if not msg.data:
            return  # the server's "no responders" notice to a sync nobody could answer
        try:
            update = AvailabilityUpdate.from_json(msg.data)
        except MalformedUpdate:
            self._on_malformed()
            return
        self.received += 1
        self._receive(update)

    async def _send(self) -> None:
        while True:
            update = await self._outbox.get()
            nc = self._nc
            if nc is None or not self.connected:
                self.dropped += 1  # dependents catch up with a sync after reconnecting
                continue
            try:
                await nc.publish(subject(self.namespace, "u", update.service), update.to_json())
                self.published += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.dropped += 1
                log.debug("nats publish failed: %s", exc)

    def close(self) -> None:
        """Stop both tasks and close the connection (in the background)."""
        for task in (self._task, self._sender):
            if task is not None:
                task.cancel()
        nc = self._nc
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(RuntimeError):  # the loop is already gone
                asyncio.get_running_loop().create_task(_quietly(nc.close()))


async def _quietly(awaitable: Any) -> None:
    with contextlib.suppress(Exception):
        await awaitable

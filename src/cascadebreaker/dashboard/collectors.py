"""The dashboard's I/O: one collector per sidecar (its /status, paced, and its Watch stream),
one Redis subscription, and the demo's fault switches. Everything they learn goes to the Fleet.

Cost on a sidecar: one Watch stream, and one /status every `interval` seconds; an update or a
lost stream asks for the next /status sooner, but never sooner than `min_gap` after the last.
Changes reach the page from the streams, not from the polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from cascadebreaker.dashboard.adapter import (
    Unreadable,
    status_from_json,
    update_from_proto,
    update_from_redis,
)
from cascadebreaker.dashboard.fleet import Fleet

__all__ = [
    "SUBSCRIBER",
    "Backoff",
    "FaultPoller",
    "Pacer",
    "RedisFeed",
    "SidecarCollector",
    "fault_text",
]

log = logging.getLogger("cascadebreaker.dashboard")

SUBSCRIBER = "ccb-dashboard"  # how the dashboard names itself on Watch streams
_STATUS_TIMEOUT = 2.0
_CONNECT_TIMEOUT = 5.0
_BACKOFF_FIRST, _BACKOFF_MAX = 0.25, 5.0
_HELD = 5.0  # a stream open this long resets the reconnect backoff


@dataclass
class Pacer:
    """When to ask a sidecar's /status next: every `interval` seconds, sooner when hurried,
    never twice within `min_gap` seconds."""

    interval: float = 5.0
    min_gap: float = 2.0
    last: float = -math.inf
    hurried: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.min_gap <= self.interval:
            raise ValueError("Pacer needs 0 < min_gap <= interval")

    def due_at(self) -> float:
        """The monotonic time of the next /status."""
        return self.last + (self.min_gap if self.hurried else self.interval)

    def asked(self, now: float) -> None:
        """A /status was asked for at `now`."""
        self.last, self.hurried = now, False

    def hurry(self) -> None:
        """Something changed: ask as soon as `min_gap` allows."""
        self.hurried = True


class Backoff:
    """Reconnect delays that double up to a cap, and reset after a connection held a while."""

    def __init__(self) -> None:
        self.delay = _BACKOFF_FIRST

    def next(self, held: float) -> float:
        """The wait before the next attempt, given how long the last connection was held."""
        if held >= _HELD:
            self.delay = _BACKOFF_FIRST
        delay, self.delay = self.delay, min(self.delay * 2, _BACKOFF_MAX)
        return delay


class SidecarCollector:
    """Keeps one sidecar's part of the fleet current: paced /status and its Watch stream."""

    def __init__(
        self,
        url: str,
        fleet: Fleet,
        http: httpx.AsyncClient,
        pacer: Pacer,
        *,
        watch: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.fleet = fleet
        self.http = http
        self.pacer = pacer
        self.watch = watch
        self.clock, self.wall = clock, wall
        self._wake = asyncio.Event()
        self._stream: asyncio.Task[None] | None = None
        self._stream_address: str | None = None

    def hurry(self) -> None:
        """Ask for /status as soon as the pacing allows."""
        self.pacer.hurry()
        self._wake.set()

    async def run(self) -> None:
        """Poll at the pacer's times until cancelled; the stream runs beside it."""
        try:
            while True:
                delay = self.pacer.due_at() - self.clock()
                if delay > 0:
                    self._wake.clear()
                    # Not wait_for: on 3.11 it loses a cancel that lands with the wake-up.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._wake.wait()
                    continue
                asked = self.clock()
                self.pacer.asked(asked)
                await self.fetch(asked)
        finally:
            if self._stream is not None:
                self._stream.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._stream

    async def fetch(self, asked: float) -> None:
        """One /status; the fleet learns the answer or that there was none."""
        try:
            response = await self.http.get(f"{self.url}/status", timeout=_STATUS_TIMEOUT)
            if response.status_code != 200:
                raise Unreadable(f"/status answered {response.status_code}")
            status = status_from_json(response.json())
        except (httpx.HTTPError, ValueError) as exc:  # Unreadable and bad JSON are ValueErrors
            self.fleet.status_failed(self.url, _reason(exc), self.wall())
            return
        self.fleet.status_received(self.url, status, asked, self.wall())
        if self.watch and status.watch_address != self._stream_address:
            self._start_stream(status.watch_address)

    def _start_stream(self, address: str | None) -> None:
        if self._stream is not None:
            self._stream.cancel()
        self._stream_address = address
        self._stream = None if address is None else asyncio.create_task(self._follow(address))

    async def _follow(self, address: str) -> None:
        """Hold a Watch stream to `address`, reconnecting with backoff."""
        import grpc

        # The generated stubs of the public contract (proto/ccb/v1/sidecar.proto).
        from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
        from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc as pb_grpc

        backoff = Backoff()
        while True:
            self.fleet.stream_changed(self.url, "connecting", self.wall())
            opened = math.inf
            async with grpc.aio.insecure_channel(address) as channel:
                try:
                    async with asyncio.timeout(_CONNECT_TIMEOUT):
                        await channel.channel_ready()
                    stub = pb_grpc.SidecarStub(channel)  # type: ignore[no-untyped-call]
                    stream = stub.Watch(pb.WatchRequest(subscriber_service=SUBSCRIBER))
                    opened = self.clock()
                    self.fleet.stream_changed(self.url, "open", self.wall())
                    async for message in stream:
                        self._receive(message)
                except (grpc.aio.AioRpcError, TimeoutError) as exc:
                    log.debug("Watch %s: %s", address, exc)
            self.fleet.stream_changed(self.url, "lost", self.wall())
            self.hurry()  # a lost stream may be a dead sidecar: /status will tell
            await asyncio.sleep(backoff.next(self.clock() - opened))

    def _receive(self, message: Any) -> None:
        try:
            update = update_from_proto(message)
        except Unreadable as exc:
            log.warning("dropped an unreadable update from %s: %s", self.url, exc)
            return
        self.fleet.update_received(update, self.clock(), self.wall(), self.url)
        self.hurry()  # /status confirms the breaker states the update implies


class RedisFeed:
    """One subscription to the cascade's Redis channel: every replica's updates."""

    def __init__(
        self,
        url: str,
        namespace: str,
        fleet: Fleet,
        hurry: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.channel = f"ccb:cascade:{namespace}"
        self.fleet = fleet
        self.hurry = hurry  # called with an update's service
        self.clock, self.wall = clock, wall
        self.unreadable = 0

    async def run(self) -> None:
        """Subscribe and feed the fleet until cancelled; reconnect when Redis goes away."""
        import redis.asyncio as aioredis

        client: Any = aioredis.Redis.from_url(
            self.url, socket_connect_timeout=_CONNECT_TIMEOUT, health_check_interval=15
        )
        backoff = Backoff()
        try:
            while True:
                self.fleet.redis_changed("connecting", self.wall())
                opened = math.inf
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                try:
                    await pubsub.subscribe(self.channel)
                    opened = self.clock()
                    self.fleet.redis_changed("open", self.wall())
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._receive(message["data"])
                except (OSError, aioredis.RedisError) as exc:
                    log.debug("Redis %s: %s", self.url, exc)
                finally:
                    with contextlib.suppress(Exception):  # closing a broken connection may fail
                        await pubsub.aclose()
                self.fleet.redis_changed("lost", self.wall())
                await asyncio.sleep(backoff.next(self.clock() - opened))
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()

    def _receive(self, data: bytes) -> None:
        try:
            update = update_from_redis(data)
        except Unreadable as exc:
            self.unreadable += 1
            log.debug("dropped an unreadable Redis update: %s", exc)
            return
        self.fleet.update_received(update, self.clock(), self.wall())
        self.hurry(update.service)


class FaultPoller:
    """The demo's fault switches (its fake third parties), read every `interval` seconds."""

    def __init__(
        self,
        urls: dict[str, str],
        fleet: Fleet,
        http: httpx.AsyncClient,
        interval: float = 2.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.urls = urls
        self.fleet = fleet
        self.http = http
        self.interval = interval
        self.wall = wall

    async def run(self) -> None:
        """Read every switch, then sleep; until cancelled."""
        while True:
            await asyncio.gather(*(self.read(s, u) for s, u in self.urls.items()))
            await asyncio.sleep(self.interval)

    async def read(self, service: str, url: str) -> None:
        """One switch; an unreadable one leaves the banner as it was."""
        try:
            response = await self.http.get(url, timeout=_STATUS_TIMEOUT)
            body = response.json()
        except (httpx.HTTPError, ValueError):
            return
        if response.status_code == 200 and isinstance(body, dict):
            self.fleet.fault_changed(service, fault_text(body.get("fault")), self.wall())


def fault_text(fault: object) -> str | None:
    """`{"mode": "slow", "delay": 2.0, "rate": 1.0}` -> `slow (delay 2.0 s)`; None: no fault."""
    if not isinstance(fault, dict) or not fault.get("mode"):
        return None
    mode = str(fault["mode"])
    details = []
    if mode == "slow" and fault.get("delay") is not None:
        details.append(f"delay {fault['delay']} s")
    rate = fault.get("rate")
    if mode != "down" and isinstance(rate, int | float) and rate < 1:
        details.append(f"rate {rate:g}")
    return f"{mode} ({', '.join(details)})" if details else mode


def _reason(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "no answer (timeout)"
    if isinstance(exc, httpx.ConnectError):
        return "connection refused"
    return str(exc) or type(exc).__name__

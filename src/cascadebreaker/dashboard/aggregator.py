"""The dashboard's core loop: the fleet, its collectors, and the latest picture for the page."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx

from cascadebreaker.dashboard.collectors import FaultPoller, Pacer, RedisFeed, SidecarCollector
from cascadebreaker.dashboard.fleet import Fleet
from cascadebreaker.dashboard.picture import picture
from cascadebreaker.dashboard.sources import Sources

__all__ = ["Aggregator", "Pacing"]

_TICK = 1.0  # seconds between expiry checks (no I/O)
_STOP_TIMEOUT = 5.0  # seconds a stop waits for its collectors

log = logging.getLogger("cascadebreaker.dashboard")


@dataclass(frozen=True)
class Pacing:
    """How often the dashboard may ask each sidecar's /status (seconds)."""

    interval: float = 5.0
    min_gap: float = 2.0


class Aggregator:
    """Follows every source and keeps one JSON picture current for the browsers."""

    def __init__(
        self,
        sources: Sources,
        pacing: Pacing = Pacing(),
        *,
        watch: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        Pacer(pacing.interval, pacing.min_gap)  # fails early on bad pacing
        self.sources = sources
        self.pacing = pacing
        # With Redis, every update of every replica arrives on one subscription: no Watch streams.
        self.watch = watch and sources.redis is None
        self.clock, self.wall = clock, wall
        self.fleet = Fleet(on_change=self._notify)
        self.fleet.declare(sources.services)
        for url, service in sources.sidecars.items():
            self.fleet.follow(url, service)
        self.collectors: dict[str, SidecarCollector] = {}
        self.redis: RedisFeed | None = None
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._http: httpx.AsyncClient | None = None
        self._cached: tuple[int, str] = (-1, "")

    async def start(self) -> None:
        """Start every collector (inside the running loop)."""
        self._http = httpx.AsyncClient(trust_env=False)
        for url in self.sources.sidecars:
            collector = SidecarCollector(
                url,
                self.fleet,
                self._http,
                Pacer(self.pacing.interval, self.pacing.min_gap),
                watch=self.watch,
                clock=self.clock,
                wall=self.wall,
            )
            self.collectors[url] = collector
            self._spawn(collector.run())
        if self.sources.redis is not None:
            self.redis = RedisFeed(
                self.sources.redis,
                self.sources.namespace,
                self.fleet,
                self._hurry_service,
                clock=self.clock,
                wall=self.wall,
            )
            self._spawn(self.redis.run())
        if self.sources.fault_urls:
            self._spawn(FaultPoller(self.sources.fault_urls, self.fleet, self._http).run())
        self._spawn(self._tick())

    async def stop(self) -> None:
        """Stop every collector and close connections."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            _, alive = await asyncio.wait(self._tasks, timeout=_STOP_TIMEOUT)
            for task in alive:  # a bug, never a reason to hang the process
                log.error("a dashboard task ignored its cancellation: %r", task)
        self._tasks.clear()
        if self._http is not None:
            await self._http.aclose()

    def picture_json(self) -> tuple[int, str]:
        """The latest picture as JSON, with the fleet version it shows (built once per version)."""
        version = self.fleet.version
        if self._cached[0] != version:
            document = picture(self.fleet, self.wall())
            document["pacing"] = {"interval": self.pacing.interval, "minGap": self.pacing.min_gap}
            self._cached = (version, json.dumps(document, separators=(",", ":")))
        return self._cached

    async def next_picture(self, after: int) -> tuple[int, str]:
        """The first picture newer than version `after` (waits for a change)."""
        while self.fleet.version <= after:
            self._changed.clear()
            await self._changed.wait()
        return self.picture_json()

    def status_requests(self) -> dict[str, int]:
        """/status requests made so far, per sidecar."""
        return {url: s.asked for url, s in self.fleet.sidecars.items()}

    def _notify(self) -> None:
        self._changed.set()

    def _hurry_service(self, service: str) -> None:
        for url, collector in self.collectors.items():
            if self.fleet.sidecars[url].name == service:
                collector.hurry()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(_TICK)
            self.fleet.tick(self.wall())

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coroutine))

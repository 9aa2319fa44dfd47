"""What the dashboard costs the sidecar, and how fast a breaker's change reaches a browser.

- Change → page: the bench is the browser: it holds `GET /api/events` (SSE) open. One trip:
  t0, then `GET /leaf/fail` through the sidecar (failure_threshold 1: the breaker opens); the
  trip ends when an SSE picture shows `shop → leaf` OPEN. Then the bench probes until the
  sidecar's breaker closed and the page shows CLOSED again, and starts the next trip.
- Cost: Watch streams the sidecar serves (`cascade.subscribers` in its /status), /status
  requests per minute (the dashboard's own count, `statusRequests` in its picture), and the
  sidecar's CPU (user + system from /proc) over a quiet window, next to the same window with
  no dashboard; plus the sidecar's CPU per /status answer (back-to-back requests).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.cascade.propagation import get
from bench.dashboard.setup import RECOVERY, Shop

TRIP_DEADLINE = 15.0  # seconds; a trip that never shows is counted as lost


@dataclass
class ModeResult:
    """One dashboard mode's numbers."""

    latencies: list[float] = field(default_factory=list)  # seconds, change -> page
    lost: int = 0
    status_per_min_busy: float = 0.0
    status_per_min_quiet: float = 0.0
    subscribers: int = 0
    cpu_ms_per_min: float = 0.0


async def _pictures(url: str) -> AsyncIterator[dict[str, Any]]:
    """Every picture the dashboard pushes (SSE), parsed."""
    async with (
        httpx.AsyncClient(timeout=None, trust_env=False) as client,
        client.stream("GET", f"{url}/api/events") as response,
    ):
        data: list[str] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line and data:
                yield json.loads("\n".join(data))
                data = []


def breaker_state(picture: dict[str, Any]) -> str | None:
    """The state the page shows for shop → leaf."""
    for breaker in picture["breakers"]:
        if (breaker["service"], breaker["upstream"]) == ("shop", "leaf"):
            return str(breaker["state"])
    return None


def status_requests(picture: dict[str, Any]) -> int:
    """The dashboard's /status requests to the sidecar so far."""
    return sum(s["statusRequests"] for svc in picture["services"] for s in svc["sidecars"])


class Page:
    """The bench's browser: the latest picture, and a way to wait for a condition on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.latest: dict[str, Any] | None = None
        self.arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Page:
        self._task = asyncio.create_task(self._follow())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _follow(self) -> None:
        async for picture in _pictures(self.url):
            self.latest = picture
            self.arrived.set()

    async def until(self, state: str, deadline: float) -> float | None:
        """Monotonic time the page first showed shop → leaf in `state`, None past `deadline`."""
        while self.latest is None or breaker_state(self.latest) != state:
            self.arrived.clear()
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                    await self.arrived.wait()
            except TimeoutError:
                return None
        return time.monotonic()


async def trips(shop: Shop, dashboard_url: str, count: int, result: ModeResult) -> None:
    """`count` trips: breaker opens, the page shows it, breaker closes, the page shows it."""
    outbound = shop.sidecar.port
    async with Page(dashboard_url) as page:
        if await page.until("CLOSED", time.monotonic() + 30) is None:
            raise RuntimeError("the dashboard never showed the sidecar's breaker")
        assert page.latest is not None
        asked_before, started = status_requests(page.latest), time.monotonic()
        for _ in range(count):
            # A random phase: a poll-only dashboard would otherwise poll right after each trip.
            await asyncio.sleep(random.uniform(0.0, 1.0))
            t0 = time.monotonic()
            await get(outbound, "/leaf/fail")
            shown = await page.until("OPEN", t0 + TRIP_DEADLINE)
            if shown is None:
                result.lost += 1
            else:
                result.latencies.append(shown - t0)
            await asyncio.sleep(RECOVERY + 0.05)
            for _ in range(100):  # the probe closes the breaker
                if await get(outbound, "/leaf/ok") == 200:
                    break
                await asyncio.sleep(0.05)
            await page.until("CLOSED", time.monotonic() + TRIP_DEADLINE)
        assert page.latest is not None
        minutes = (time.monotonic() - started) / 60
        result.status_per_min_busy = (status_requests(page.latest) - asked_before) / minutes


async def quiet_window(
    shop: Shop, dashboard_url: str | None, seconds: float, result: ModeResult
) -> None:
    """The sidecar's CPU over `seconds` of no traffic, and the dashboard's /status rate."""
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        picture = None
        if dashboard_url is not None:
            picture = (await client.get(f"{dashboard_url}/api/picture")).json()
        cpu = cpu_seconds(shop.sidecar.process.pid)
        await asyncio.sleep(seconds)
        cpu = cpu_seconds(shop.sidecar.process.pid) - cpu
        status = (await client.get(f"{shop.admin_url}/status")).json()
        result.subscribers = int(status["cascade"]["subscribers"])
        if picture is not None and dashboard_url is not None:
            after = (await client.get(f"{dashboard_url}/api/picture")).json()
            asked = status_requests(after) - status_requests(picture)
            result.status_per_min_quiet = asked / (seconds / 60)
    result.cpu_ms_per_min = cpu * 1000 / (seconds / 60)


async def cpu_per_status(shop: Shop, requests: int) -> float:
    """The sidecar's CPU per /status answer, in µs (back-to-back, one connection)."""
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        await client.get(f"{shop.admin_url}/status")
        cpu = cpu_seconds(shop.sidecar.process.pid)
        for _ in range(requests):
            (await client.get(f"{shop.admin_url}/status")).raise_for_status()
        return (cpu_seconds(shop.sidecar.process.pid) - cpu) * 1e6 / requests


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of `pid` in ns resolution (/proc schedstat), in seconds.

    /proc/PID/stat counts in 10 ms ticks: too coarse for a sidecar that sleeps most of a minute.
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9

"""The aggregator against a real sidecar: Watch and Redis carry changes; /status only confirms.

The /status pacing is set to ten minutes in these tests, so whatever the fleet learns after
the first /status came from a live stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cascadebreaker.dashboard.aggregator import Aggregator, Pacing
from cascadebreaker.dashboard.sources import Sources

from .conftest import SERVING, ShopSidecar, start_shop, until

pytestmark = pytest.mark.slow

NEVER = Pacing(interval=600.0, min_gap=600.0)


@contextlib.asynccontextmanager
async def running(aggregator: Aggregator) -> AsyncIterator[Aggregator]:
    """The aggregator started, and stopped afterwards."""
    await aggregator.start()
    try:
        yield aggregator
    finally:
        await aggregator.stop()


async def test_the_watch_stream_carries_the_open_breaker_without_polling(
    shop: ShopSidecar,
) -> None:
    aggregator = Aggregator(Sources(sidecars={shop.admin_url: None}), NEVER)
    async with running(aggregator) as live:
        fleet = live.fleet
        sidecar = fleet.sidecars[shop.admin_url]
        await until(lambda: sidecar.stream == "open", "the Watch stream")

        await asyncio.to_thread(shop.open_breaker)

        await until(lambda: SERVING in fleet.beliefs(time.time()), "the update on the Watch stream")
        assert fleet.availability(time.time())["shop"] == "unavailable"
        view = fleet.breakers()[("shop", "pay")]
        assert (view.state, view.inferred) == ("OPEN", True)
        assert fleet.updates_of[SERVING][0]["via"] == "watch"
        assert live.status_requests() == {shop.admin_url: 1}  # the first one only


async def test_redis_pub_sub_carries_updates_with_no_watch_stream(
    tmp_path: Path, redis_server: object
) -> None:
    url = redis_server.url  # type: ignore[attr-defined]
    sidecar = start_shop(tmp_path, redis_url=url)
    try:
        sources = Sources(sidecars={sidecar.admin_url: None}, redis=url)
        async with running(Aggregator(sources, NEVER)) as live:
            fleet = live.fleet
            await until(lambda: fleet.redis == "open", "the Redis subscription")
            await until(lambda: fleet.sidecars[sidecar.admin_url].reachable is True, "/status")

            await asyncio.to_thread(sidecar.open_breaker)

            await until(lambda: SERVING in fleet.beliefs(time.time()), "the update on Redis")
            assert fleet.updates_of[SERVING][0]["via"] == "redis"
            assert fleet.sidecars[sidecar.admin_url].stream == "none"
    finally:
        sidecar.kill()


async def test_redis_alone_shows_services_it_hears_about(
    tmp_path: Path, redis_server: object
) -> None:
    url = redis_server.url  # type: ignore[attr-defined]
    sidecar = start_shop(tmp_path, redis_url=url)
    try:
        async with running(Aggregator(Sources(redis=url), NEVER)) as live:
            await until(lambda: live.fleet.redis == "open", "the Redis subscription")

            await asyncio.to_thread(sidecar.open_breaker)

            await until(lambda: "shop" in live.fleet.services(), "shop heard on Redis")
            assert live.fleet.availability(time.time())["shop"] == "unavailable"
    finally:
        sidecar.kill()


async def test_a_killed_sidecar_turns_unreachable_when_its_stream_breaks(
    shop: ShopSidecar,
) -> None:
    pacing = Pacing(interval=600.0, min_gap=0.5)  # only the lost stream asks again
    async with running(Aggregator(Sources(sidecars={shop.admin_url: None}), pacing)) as live:
        fleet = live.fleet
        sidecar = fleet.sidecars[shop.admin_url]
        await until(lambda: sidecar.stream == "open", "the Watch stream")

        shop.kill()

        await until(lambda: fleet.availability(time.time())["shop"] == "unreachable", "unreachable")
        assert sidecar.error == "connection refused"
        assert "shop sidecar unreachable: connection refused" in [e["text"] for e in fleet.timeline]


async def test_poll_only_learns_the_same_from_status_alone(shop: ShopSidecar) -> None:
    pacing = Pacing(interval=0.5, min_gap=0.5)
    sources = Sources(sidecars={shop.admin_url: None})
    async with running(Aggregator(sources, pacing, watch=False)) as live:
        fleet = live.fleet

        await asyncio.to_thread(shop.open_breaker)

        await until(lambda: fleet.breakers()[("shop", "pay")].state == "OPEN", "/status")
        view = fleet.breakers()[("shop", "pay")]
        assert view.inferred is False
        assert fleet.sidecars[shop.admin_url].stream == "none"
        assert fleet.updates_of == {}  # nothing came from a stream

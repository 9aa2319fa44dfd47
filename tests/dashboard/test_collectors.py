"""Pacing, reconnect backoff and the /status reader (mock transport: the unit tier)."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from cascadebreaker.dashboard.collectors import (
    Backoff,
    Pacer,
    SidecarCollector,
    fault_text,
)
from cascadebreaker.dashboard.fleet import Fleet

URL = "http://127.0.0.1:1001"


def test_pacer_polls_every_interval_and_sooner_when_hurried_but_never_within_min_gap() -> None:
    pacer = Pacer(interval=5.0, min_gap=2.0)
    assert pacer.due_at() == -math.inf  # the first /status at once

    pacer.asked(10.0)
    assert pacer.due_at() == 15.0
    pacer.hurry()
    assert pacer.due_at() == 12.0  # an update wants news, not before min_gap
    pacer.hurry()
    assert pacer.due_at() == 12.0  # many updates, still one /status

    pacer.asked(12.0)
    assert pacer.due_at() == 17.0  # back to the interval


@pytest.mark.parametrize(("interval", "min_gap"), [(5.0, 0.0), (1.0, 2.0), (5.0, -1.0)])
def test_pacer_rejects_impossible_pacing(interval: float, min_gap: float) -> None:
    with pytest.raises(ValueError, match="min_gap"):
        Pacer(interval, min_gap)


def test_backoff_doubles_to_a_cap_and_resets_after_a_held_connection() -> None:
    backoff = Backoff()
    delays = [backoff.next(held=0.0) for _ in range(7)]
    assert delays == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]

    assert backoff.next(held=60.0) == 0.25


@pytest.mark.parametrize(
    ("fault", "text"),
    [
        (None, None),
        ({}, None),
        ({"mode": "down", "rate": 1.0, "delay": 2.0}, "down"),
        ({"mode": "slow", "rate": 1.0, "delay": 0.5}, "slow (delay 0.5 s)"),
        ({"mode": "errors", "rate": 0.25}, "errors (rate 0.25)"),
    ],
)
def test_fault_text(fault: object, text: str | None) -> None:
    assert fault_text(fault) == text


def _collector(handler: httpx.MockTransport) -> tuple[SidecarCollector, Fleet]:
    fleet = Fleet()
    fleet.follow(URL)
    http = httpx.AsyncClient(transport=handler)
    collector = SidecarCollector(URL, fleet, http, Pacer(), watch=False, wall=lambda: 1.0)
    return collector, fleet


async def test_fetch_reads_a_status_into_the_fleet() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/status"
        return httpx.Response(200, json={"service": "inventory", "breakers": {}})

    collector, fleet = _collector(httpx.MockTransport(answer))

    await collector.fetch(asked=5.0)

    sidecar = fleet.sidecars[URL]
    assert (sidecar.service, sidecar.reachable, sidecar.asked_at) == ("inventory", True, 5.0)
    assert sidecar.asked == 1


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (httpx.Response(500, text="boom"), "/status answered 500"),
        (httpx.Response(200, text="<html>"), "Expecting value"),
        (httpx.Response(200, json={"service": 5}), "no service name"),
    ],
)
async def test_fetch_marks_a_bad_answer_unreachable_with_the_reason(
    response: httpx.Response, reason: str
) -> None:
    collector, fleet = _collector(httpx.MockTransport(lambda _request: response))

    await collector.fetch(asked=1.0)

    sidecar = fleet.sidecars[URL]
    assert sidecar.reachable is False
    assert reason in sidecar.error


async def test_fetch_of_a_dead_sidecar_says_connection_refused() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    collector, fleet = _collector(httpx.MockTransport(refuse))

    await collector.fetch(asked=1.0)

    assert fleet.sidecars[URL].error == "connection refused"


async def test_a_hurry_racing_the_cancel_still_stops_the_collector() -> None:
    """Python 3.11's wait_for returns the inner result when both finish in one loop step, and
    the cancellation is lost: the collector polled forever and `ccb dashboard`'s stop hung."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"service": "inventory", "breakers": {}})

    collector, _ = _collector(httpx.MockTransport(answer))
    task = asyncio.create_task(collector.run())
    for _ in range(20):  # the first /status, then the wait for the next one
        await asyncio.sleep(0)
    collector.hurry()  # the wake-up and the cancel land in the same step
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5.0)  # a bound on a hang, not a timing claim
    assert done == {task}, "the collector ignored its cancellation"
    assert task.cancelled()

"""The scripted story of `ccb demo`: healthy → courier down → courier back, under steady load."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from cascadebreaker.demo.control import fault_url
from cascadebreaker.demo.load import LoadReport, OrderResult, run_load
from cascadebreaker.demo.observe import ServiceView, observe, total
from cascadebreaker.demo.topology import Mode, Topology


@dataclass(frozen=True)
class Chapter:
    """One step of the story: what happens at its start, and how long it lasts."""

    title: str
    caption: str
    seconds: float
    fault: dict[str, object] | None = None  # injected into the courier at the start
    clear: bool = False  # clear the courier's fault at the start


def chapters(mode: Mode, seconds: float) -> list[Chapter]:
    """The story for a mode; `seconds` scales every chapter."""
    refused_where = {
        Mode.SIDECAR: "the cascade refuses orders at the gateway: inventory and payment untouched",
        Mode.PLAIN: "plain breakers: orders still reserve stock and charge, then compensate",
        Mode.DIRECT: "no breakers: every order waits on the courier, then compensates",
    }[mode]
    return [
        Chapter("healthy", "orders flow: reserve → charge → ship", seconds),
        Chapter("courier down", refused_where, seconds * 2, fault={"mode": "down"}),
        Chapter(
            "courier back",
            "fault cleared; breakers probe and orders flow again",
            seconds * 2,
            clear=True,
        ),
    ]


@dataclass
class ChapterTally:
    """What happened during one chapter: order outcomes and the work the system did."""

    title: str
    outcomes: dict[str, int] = field(
        default_factory=lambda: {"ok": 0, "failed": 0, "refused": 0, "error": 0}
    )
    reservations: int = 0
    charges: int = 0
    compensations: int = 0


@dataclass
class StoryState:
    """Everything the live view shows, updated while the story runs."""

    topology: Topology
    chapter: Chapter | None = None
    chapter_started: float = 0.0
    tallies: list[ChapterTally] = field(default_factory=list)
    views: dict[str, ServiceView] = field(default_factory=dict)
    done: bool = False

    def record(self, result: OrderResult) -> None:
        """Count an order into the current chapter."""
        if self.tallies:
            self.tallies[-1].outcomes[result.outcome] += 1


def _work(views: dict[str, ServiceView]) -> tuple[int, int, int]:
    return (
        total(views, "inventory", "reservations_made"),
        total(views, "payment", "charges"),
        total(views, "order", "compensations"),
    )


async def run_story(
    topology: Topology,
    state: StoryState,
    *,
    seconds: float = 6.0,
    rate: float = 5.0,
    refresh: Callable[[], None] = lambda: None,
) -> LoadReport:
    """Run every chapter under steady load, keeping `state` current; returns all orders."""
    stop = asyncio.Event()
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
        load = asyncio.create_task(
            run_load(
                topology.public_url,
                rate=rate,
                stop=stop,
                on_result=state.record,
                request_timeout=topology.timings.call_timeout * 4,
            )
        )
        try:
            for chapter in chapters(topology.mode, seconds):
                if chapter.fault is not None:
                    (
                        await client.post(fault_url(topology, "courier"), json=chapter.fault)
                    ).raise_for_status()
                if chapter.clear:
                    (await client.delete(fault_url(topology, "courier"))).raise_for_status()
                before = _work(await observe(topology, client))
                state.chapter, state.chapter_started = chapter, time.monotonic()
                state.tallies.append(ChapterTally(chapter.title))
                end = time.monotonic() + chapter.seconds
                while time.monotonic() < end:
                    state.views = await observe(topology, client)
                    tally = state.tallies[-1]
                    now = _work(state.views)
                    tally.reservations, tally.charges, tally.compensations = (
                        now[0] - before[0],
                        now[1] - before[1],
                        now[2] - before[2],
                    )
                    refresh()
                    await asyncio.sleep(min(0.5, max(0.0, end - time.monotonic())))
        finally:
            stop.set()
            report = await load
        state.views = await observe(topology, client)
        state.done = True
        refresh()
    return report


async def steady_load(topology: Topology, rate: float) -> None:
    """Orders at `rate` per second until cancelled (so faults switched meanwhile show)."""
    while True:  # one-minute rounds: the results of a long run do not pile up
        await run_load(
            topology.public_url,
            rate=rate,
            duration=60.0,
            request_timeout=topology.timings.call_timeout * 4,
        )


async def watch(topology: Topology, state: StoryState, refresh: Callable[[], None]) -> None:
    """Keep the view current while the demo just runs (until cancelled)."""
    state.chapter = Chapter(
        "running", "switch faults with `ccb fault inject|clear`; Ctrl-C stops", math.inf
    )
    state.chapter_started = time.monotonic()
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
        while True:
            state.views = await observe(topology, client)
            refresh()
            await asyncio.sleep(1.0)

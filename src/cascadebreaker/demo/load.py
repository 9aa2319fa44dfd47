"""Load generator for the demo and the experiments: orders at a fixed rate, every outcome kept."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from cascadebreaker.demo.refusal import is_refusal

Outcome = Literal["ok", "failed", "refused", "error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "failed", "refused", "error")


@dataclass(frozen=True)
class OrderResult:
    """One order: when it started (seconds since the load began), how long, and how it ended."""

    started: float
    latency: float
    status: int  # 0 when no HTTP response came back
    outcome: Outcome
    compensations: int = 0


def classify(status: int, body: Any) -> Outcome:
    """An order's outcome from the gateway's answer.

    ok: created. failed: the saga ran and was compensated (409). refused: turned away before
    any work (503 from a breaker, the cascade or the pre-check). error: anything else.
    """
    if status == 201:
        return "ok"
    if status == 409:
        return "failed"
    if is_refusal(status, body):
        return "refused"
    return "error"


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100, nearest rank) of values, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class LoadReport:
    """Every result of one load run, with summaries."""

    results: list[OrderResult] = field(default_factory=list)
    duration: float = 0.0

    def counts(self) -> dict[str, int]:
        """Orders per outcome."""
        counter = Counter(r.outcome for r in self.results)
        return {o: counter[o] for o in OUTCOMES}

    def latencies_ms(self, *outcomes: Outcome) -> list[float]:
        """Latencies in milliseconds of the orders with these outcomes."""
        return [r.latency * 1000 for r in self.results if r.outcome in outcomes]

    def between(self, start: float, end: float) -> LoadReport:
        """The orders that started within [start, end) seconds of the load's beginning."""
        return LoadReport([r for r in self.results if start <= r.started < end], end - start)

    def finished_before(self, end: float) -> LoadReport:
        """The orders that started and ended before `end` (none of them saw what came after)."""
        return LoadReport([r for r in self.results if r.started + r.latency < end], end)

    def summary(self) -> dict[str, Any]:
        """Counts and p50/p95/p99 latency (ms) of successful and of unsuccessful orders."""
        ok = self.latencies_ms("ok")
        bad = self.latencies_ms("failed", "refused", "error")
        return {
            "orders": len(self.results),
            **self.counts(),
            "compensations_seen": sum(r.compensations for r in self.results),
            **{f"p{q}_ms_ok": percentile(ok, q) for q in (50, 95, 99)},
            **{f"p{q}_ms_failed": percentile(bad, q) for q in (50, 95, 99)},
        }


async def place_order(
    client: httpx.AsyncClient, url: str, started: float, clock: Callable[[], float]
) -> OrderResult:
    """POST one order to the gateway and classify the answer."""
    t0 = clock()
    try:
        response = await client.post(url, json={"item": "widget", "quantity": 1, "amount": 10.0})
    except httpx.HTTPError:
        return OrderResult(started, clock() - t0, 0, "error")
    latency = clock() - t0
    try:
        body = response.json()
    except ValueError:
        body = None
    compensations = body.get("compensations", 0) if isinstance(body, dict) else 0
    outcome = classify(response.status_code, body)
    return OrderResult(started, latency, response.status_code, outcome, int(compensations or 0))


async def run_load(
    base_url: str,
    *,
    rate: float,
    duration: float | None = None,
    count: int | None = None,
    concurrency: int = 64,
    request_timeout: float = 10.0,
    stop: asyncio.Event | None = None,
    on_result: Callable[[OrderResult], None] | None = None,
) -> LoadReport:
    """Send orders to `base_url/orders` at `rate` per second (open loop, bounded in flight).

    Ends after `duration` seconds, `count` orders, or when `stop` is set, whichever comes
    first; then waits for the orders in flight.
    """
    if duration is None and count is None and stop is None:
        raise ValueError("run_load needs a duration, a count or a stop event")
    if rate <= 0 or concurrency < 1:
        raise ValueError(f"rate must be > 0 and concurrency >= 1, got {rate} and {concurrency}")
    clock = time.monotonic
    url = base_url.rstrip("/") + "/orders"
    report = LoadReport()
    slots = asyncio.Semaphore(concurrency)
    tasks: set[asyncio.Task[None]] = set()
    t_start = clock()

    async def one(started: float) -> None:
        try:
            result = await place_order(client, url, started, clock)
        finally:
            slots.release()
        report.results.append(result)
        if on_result is not None:
            on_result(result)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(trust_env=False, timeout=request_timeout, limits=limits) as client:
        sent = 0
        while True:
            now = clock() - t_start
            if (count is not None and sent >= count) or (duration is not None and now >= duration):
                break
            if stop is not None and stop.is_set():
                break
            delay = sent / rate - now
            if delay > 0:
                await asyncio.sleep(delay)
            # Open loop, but bounded: when `concurrency` orders hang, the next one waits.
            await slots.acquire()
            task = asyncio.create_task(one(clock() - t_start))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
    report.duration = clock() - t_start
    report.results.sort(key=lambda r: r.started)
    return report

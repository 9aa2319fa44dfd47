"""The overhead experiment: CPU, memory and response time of the demo with and without sidecars."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from cascadebreaker.demo.launcher import DemoSystem
from cascadebreaker.demo.load import percentile, run_load
from cascadebreaker.demo.observe import reset_stats
from cascadebreaker.demo.topology import Mode, Timings

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcessSample:
    """CPU seconds used so far and resident memory of a set of processes (Linux /proc)."""

    cpu_s: float
    rss_bytes: int


def sample(pids: Iterable[int]) -> ProcessSample:
    """Sum CPU time (user + system) and RSS over `pids`; vanished processes count as zero."""
    cpu = 0.0
    rss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                # Fields after the parenthesised command name; utime and stime are 14 and 15.
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / _TICK
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) * 1024
                        break
        except (OSError, IndexError, ValueError):
            continue
    return ProcessSample(cpu, rss)


async def measure_rate(system: DemoSystem, rate: float, seconds: float) -> dict[str, Any]:
    """Healthy load at `rate` orders/s: CPU % and RSS of all processes, latency of orders."""
    url = system.topology.public_url
    pids = list(system.pids().values())
    async with httpx.AsyncClient(trust_env=False) as client:
        await reset_stats(system.topology, client)
    await run_load(url, rate=rate, duration=min(2.0, seconds / 3))  # warm pools and caches
    before, t0 = sample(pids), time.monotonic()
    report = await run_load(url, rate=rate, duration=seconds)
    after, elapsed = sample(pids), time.monotonic() - t0
    ok_ms = report.latencies_ms("ok")
    return {
        "rate": rate,
        "orders": len(report.results),
        "ok": len(ok_ms),
        "cpu_percent": round((after.cpu_s - before.cpu_s) / elapsed * 100, 2),
        "rss_mb": round(after.rss_bytes / 2**20, 1),
        "mean_ms": round(statistics.fmean(ok_ms), 3) if ok_ms else None,
        "p95_ms": _round(percentile(ok_ms, 95)),
        "p99_ms": _round(percentile(ok_ms, 99)),
    }


def run_overhead(
    rates: list[float],
    seconds: float,
    progress: Callable[[str], None] = lambda _msg: None,
    modes: tuple[Mode, ...] = (Mode.DIRECT, Mode.SIDECAR),
) -> dict[str, Any]:
    """The whole system at several rates, without and with sidecars, and the differences."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for mode in modes:
        runs[mode.value] = []
        with DemoSystem.create(mode, Timings(call_timeout=2.0)) as system:
            for rate in rates:
                progress(f"overhead / {mode.value} / {rate:g} orders/s")
                runs[mode.value].append(asyncio.run(measure_rate(system, rate, seconds)))
    result: dict[str, Any] = {"rates": rates, "seconds_per_rate": seconds, "runs": runs}
    if Mode.DIRECT.value in runs and Mode.SIDECAR.value in runs:
        result["added"] = [
            _added(base, with_sidecars)
            for base, with_sidecars in zip(runs["direct"], runs["sidecar"], strict=True)
        ]
    return result


def _added(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    def diff(key: str) -> float | None:
        if base[key] is None or other[key] is None:
            return None
        return round(float(other[key]) - float(base[key]), 3)

    def pct(key: str) -> float | None:
        if not base[key] or other[key] is None:
            return None
        return round((float(other[key]) - float(base[key])) / float(base[key]) * 100, 2)

    return {
        "rate": base["rate"],
        "mean_ms": diff("mean_ms"),
        "p95_ms": diff("p95_ms"),
        "cpu_percent_points": diff("cpu_percent"),
        "cpu_relative_pct": pct("cpu_percent"),
        "rss_mb": diff("rss_mb"),
        "rss_relative_pct": pct("rss_mb"),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)

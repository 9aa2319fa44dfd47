"""The overhead experiment: CPU, memory and response time of the demo with and without sidecars."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cascadebreaker.demo.launcher import DemoSystem
from cascadebreaker.demo.load import percentile, run_load
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


@dataclass
class RateWindow:
    """What one measured window of load produced."""

    cpu_s: float
    elapsed_s: float
    rss_bytes: int
    orders: int
    ok_ms: list[float]


async def measure_window(system: DemoSystem, rate: float, seconds: float) -> RateWindow:
    """Healthy load at `rate` orders/s for `seconds`: CPU and RSS of all processes, latencies."""
    pids = list(system.pids().values())
    before, t0 = sample(pids), time.monotonic()
    report = await run_load(system.topology.public_url, rate=rate, duration=seconds)
    after, elapsed = sample(pids), time.monotonic() - t0
    return RateWindow(
        after.cpu_s - before.cpu_s,
        elapsed,
        after.rss_bytes,
        len(report.results),
        report.latencies_ms("ok"),
    )


def summarize(rate: float, windows: list[RateWindow]) -> dict[str, Any]:
    """One rate's numbers over all its windows."""
    ok_ms = [ms for w in windows for ms in w.ok_ms]
    elapsed = sum(w.elapsed_s for w in windows)
    return {
        "rate": rate,
        "orders": sum(w.orders for w in windows),
        "ok": len(ok_ms),
        "cpu_percent": round(sum(w.cpu_s for w in windows) / elapsed * 100, 2),
        "rss_mb": round(max(w.rss_bytes for w in windows) / 2**20, 1),
        "mean_ms": round(statistics.fmean(ok_ms), 3) if ok_ms else None,
        "p95_ms": _round(percentile(ok_ms, 95)),
        "p99_ms": _round(percentile(ok_ms, 99)),
    }


async def _interleaved(
    systems: dict[str, DemoSystem],
    rates: list[float],
    seconds: float,
    rounds: int,
    progress: Callable[[str], None],
) -> dict[str, list[dict[str, Any]]]:
    windows: dict[str, dict[float, list[RateWindow]]] = {m: {r: [] for r in rates} for m in systems}
    for rate in rates:
        progress(f"overhead / {rate:g} orders/s / {' vs '.join(systems)}")
        for system in systems.values():  # warm pools and caches at this rate
            await run_load(system.topology.public_url, rate=rate, duration=1.0)
        for _ in range(rounds):
            for mode, system in systems.items():
                windows[mode][rate].append(await measure_window(system, rate, seconds / rounds))
    return {m: [summarize(r, windows[m][r]) for r in rates] for m in systems}


def run_overhead(
    rates: list[float],
    seconds: float,
    progress: Callable[[str], None] = lambda _msg: None,
    modes: tuple[Mode, ...] = (Mode.DIRECT, Mode.SIDECAR),
    rounds: int = 4,
) -> dict[str, Any]:
    """The whole system at several rates, without and with sidecars, and the differences.

    Both systems run side by side and take turns in short windows, so that drift in the
    machine's load (other work, thermal) hits both alike.
    """
    # No saga pre-check: it is an extra call the app chooses to make, not part of the hop cost.
    systems = {
        mode.value: DemoSystem.create(mode, Timings(call_timeout=2.0), precheck=False)
        for mode in modes
    }
    try:
        for system in systems.values():
            system.start()
        runs = asyncio.run(_interleaved(systems, rates, seconds, rounds, progress))
    finally:
        for system in systems.values():
            system.stop()
    result: dict[str, Any] = {
        "rates": rates,
        "seconds_per_rate": seconds,
        "rounds": rounds,
        "runs": runs,
    }
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

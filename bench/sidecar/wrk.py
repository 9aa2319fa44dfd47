"""Drive wrk and read its results from a Lua `done` hook (percentiles in µs, error counts).

Paced runs use wrk's Lua `delay()` hook (Debian's wrk 4.1 has no `-R`; wrk2 is not packaged):
each connection waits `delay` ms after every response before its next request, so
`connections / (delay + latency)` sets the rate. Latency is still measured from send to
response by wrk itself, in C, so pacing adds no client overhead to the numbers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_DONE = """\
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'CCB-RESULT {"requests":%d,"duration_us":%d,"errors":%d,"status_errors":%d,' ..
    '"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d,"mean":%.3f}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
"""

_DELAY = "delay = function() return {ms} end\n"


class WrkMissing(RuntimeError):
    """wrk is not installed."""


@dataclass
class WrkResult:
    """One wrk run: throughput, latency percentiles (µs) and errors."""

    requests: int
    seconds: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float
    mean: float
    errors: int
    status_errors: int

    @property
    def rps(self) -> float:
        """Requests per second."""
        return self.requests / self.seconds if self.seconds else 0.0


def wrk_binary() -> str:
    """The wrk executable (WrkMissing with the install hint when absent)."""
    binary = shutil.which("wrk")
    if binary is None:
        raise WrkMissing("wrk not found: apt-get install -y wrk")
    return binary


def run_wrk(
    url: str,
    connections: int,
    seconds: float,
    workdir: Path,
    delay_ms: int = 0,
) -> WrkResult:
    """Run wrk (one thread) against `url` and parse its `done` hook output."""
    script = workdir / f"wrk-{delay_ms}.lua"
    if not script.exists():
        script.write_text((_DELAY.format(ms=delay_ms) if delay_ms else "") + _DONE)
    argv = [
        wrk_binary(),
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "5s",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("CCB-RESULT "):
            data = json.loads(line.removeprefix("CCB-RESULT "))
            return WrkResult(
                requests=data["requests"],
                seconds=data["duration_us"] / 1e6,
                p50=data["p50"],
                p90=data["p90"],
                p99=data["p99"],
                p999=data["p999"],
                max=data["max"],
                mean=data["mean"],
                errors=data["errors"],
                status_errors=data["status_errors"],
            )
    raise RuntimeError(f"wrk gave no result for {url}: {done.stdout[-500:]} {done.stderr[-500:]}")

"""The cost of the cascade on the request path: learning on vs learning off vs no cascade.

The mesh shape: wrk -> client sidecar (outbound) -> server sidecar (inbound) -> nginx. Every
request carries `traceparent` and `ccb-serving-endpoint`, so with learning on the client side
learns (a known edge: the steady state) and issues a hop token, and the server side verifies
the token, begins and ends a trace and answers with `ccb-sidecar-grpc`. Three pairs run side by
side; rounds are interleaved so a noisy neighbour hurts every mode alike.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from bench.sidecar.procs import Proc, free_port, start_sidecar, start_upstream
from bench.sidecar.wrk import wrk_binary

MODES: dict[str, dict[str, Any]] = {
    "no cascade": {"enabled": False},
    "cascade, learning off": {"learning": False},
    "cascade, learning on": {},
}
SECRET = "bench-cascade-secret"

_DONE = """\
done = function(summary, latency, requests)
  io.write(string.format('CCB-RESULT {"requests":%d,"duration_us":%d,"errors":%d,' ..
    '"status_errors":%d,"p50":%d,"p99":%d}\\n', summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout, summary.errors.status, latency:percentile(50),
    latency:percentile(99)))
end
"""


@dataclass
class Pair:
    """A client sidecar and a server sidecar in one mode."""

    mode: str
    client: Proc
    server: Proc


@dataclass
class ModeResult:
    """Per-round wrk results of one mode."""

    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)  # per request, mean of the two sidecars
    errors: int = 0


def start_pairs(workdir: Path) -> tuple[Proc, list[Pair]]:
    """nginx plus one client/server sidecar pair per mode."""
    app = start_upstream(workdir)
    pairs = []
    for index, (mode, cascade) in enumerate(MODES.items()):
        cascade = {**cascade, "secret": SECRET} if cascade.get("enabled", True) else cascade
        inbound = free_port()
        server = start_sidecar(
            workdir,
            f"payment-{index}",
            {
                "service": "payment",
                "app": f"http://127.0.0.1:{app.port}",
                "listen": {
                    "outbound": None,
                    "inbound": f"127.0.0.1:{inbound}",
                    "grpc": f"127.0.0.1:{free_port()}",
                    "admin": f"127.0.0.1:{free_port()}",
                },
                "cascade": cascade,
                "log_level": "warning",
            },
            "/",
        )
        client = start_sidecar(
            workdir,
            f"checkout-{index}",
            {
                "service": "checkout",
                "listen": {
                    "outbound": f"127.0.0.1:{free_port()}",
                    "inbound": None,
                    "grpc": f"127.0.0.1:{free_port()}",
                    "admin": f"127.0.0.1:{free_port()}",
                },
                "upstreams": {
                    "payment": {"url": f"http://127.0.0.1:{inbound}", "max_idle_connections": 64}
                },
                "cascade": cascade,
                "log_level": "warning",
            },
            "/payment/",
        )
        pairs.append(Pair(mode, client, server))
    return app, pairs


def run_wrk(port: int, seconds: float, workdir: Path) -> dict[str, Any]:
    """wrk, one thread and one connection, with the learning headers."""
    script = workdir / "cascade-wrk.lua"
    script.write_text(_DONE)
    trace = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"
    argv = [
        wrk_binary(),
        "-t1",
        "-c1",
        f"-d{max(1, round(seconds))}s",
        "-H",
        f"traceparent: {trace}",
        "-H",
        "ccb-serving-endpoint: checkout POST /v1/orders",
        "-s",
        str(script),
        f"http://127.0.0.1:{port}/payment/v1/charges/42",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("CCB-RESULT "):
            result: dict[str, Any] = json.loads(line.removeprefix("CCB-RESULT "))
            return result
    raise RuntimeError(f"wrk gave no result: {done.stdout[-300:]} {done.stderr[-300:]}")


def measure(pairs: list[Pair], rounds: int, seconds: float, workdir: Path) -> dict[str, ModeResult]:
    """Interleaved rounds: every mode once per round."""
    results = {pair.mode: ModeResult() for pair in pairs}
    for pair in pairs:
        run_wrk(pair.client.port, 1, workdir)  # warm-up: connections, caches, the edge
    for _ in range(rounds):
        for pair in pairs:
            cpu = pair.client.cpu_seconds() + pair.server.cpu_seconds()
            data = run_wrk(pair.client.port, seconds, workdir)
            cpu = pair.client.cpu_seconds() + pair.server.cpu_seconds() - cpu
            result = results[pair.mode]
            result.cpu_us.append(cpu / max(data["requests"], 1) / 2 * 1e6)
            result.p50.append(float(data["p50"]))
            result.p99.append(float(data["p99"]))
            result.rps.append(data["requests"] / (data["duration_us"] / 1e6))
            result.errors += int(data["errors"]) + int(data["status_errors"])
    return results


def summary(results: dict[str, ModeResult]) -> dict[str, dict[str, float]]:
    """Median over rounds per mode."""
    return {
        mode: {
            "p50": median(r.p50),
            "p99": median(r.p99),
            "rps": median(r.rps),
            "cpu_us": median(r.cpu_us),
            "errors": float(r.errors),
        }
        for mode, r in results.items()
    }

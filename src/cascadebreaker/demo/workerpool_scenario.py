"""The worker-pool scenario: load both routes while the upstream hangs, without and with a breaker.

`ccb demo workerpool` prints, for each variant, how `/other` fared in the measured window (after
a warm-up that covers the first upstream timeouts, before any breaker can have seen a failure).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cascadebreaker.demo.launcher import LaunchError, ManagedProcess
from cascadebreaker.demo.load import percentile
from cascadebreaker.demo.topology import HOST, free_port


@dataclass(frozen=True)
class ScenarioSettings:
    """Load shape and timings of the scenario."""

    workers: int = 8
    upstream_timeout: float = 2.0
    slow_clients: int = 16  # concurrent callers of /slow-route: twice the pool
    other_clients: int = 2
    other_timeout: float = 1.0  # a caller of /other gives up after this
    think_time: float = 0.05
    warmup: float = 5.0
    measure: float = 10.0
    failure_threshold: int = 3
    recovery_timeout: float = 5.0


@dataclass
class RouteStats:
    """Outcomes of one route in the measured window."""

    requests: int = 0
    ok: int = 0
    timeouts: int = 0
    errors: int = 0
    rejected: int = 0  # 503 at once from the open breaker: failing fast, by design
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, outcome: str, latency: float) -> None:
        """Count one request."""
        self.requests += 1
        if outcome == "ok":
            self.ok += 1
            self.latencies_ms.append(latency * 1000)
        elif outcome == "timeout":
            self.timeouts += 1
        elif outcome == "rejected":
            self.rejected += 1
        else:
            self.errors += 1

    def summary(self) -> dict[str, Any]:
        """Counts and p50/p99 of successful requests (ms)."""
        data = asdict(self)
        del data["latencies_ms"]
        data["p50_ms"] = percentile(self.latencies_ms, 50)
        data["p99_ms"] = percentile(self.latencies_ms, 99)
        return data


@dataclass
class VariantResult:
    """One run of the scenario: without or with the breaker."""

    breaker: bool
    routes: dict[str, RouteStats] = field(
        default_factory=lambda: {"/other": RouteStats(), "/slow-route": RouteStats()}
    )

    @property
    def other_failures(self) -> int:
        """Requests to /other that timed out or failed."""
        other = self.routes["/other"]
        return other.timeouts + other.errors


@asynccontextmanager
async def hanging_upstream() -> AsyncIterator[str]:
    """An upstream that accepts connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the caller gives up

    server = await asyncio.start_server(hold, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://{HOST}:{port}/hang"
    finally:
        server.close()
        for writer in held:
            writer.close()


async def _client_loop(
    client: httpx.AsyncClient,
    url: str,
    request_timeout: float,
    think: float,
    deadline: float,
    measure_from: float,
    stats: RouteStats,
) -> None:
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            response = await client.get(url, timeout=request_timeout)
            status = response.status_code
            outcome = "ok" if status == 200 else "rejected" if status == 503 else "error"
        except httpx.TimeoutException:
            outcome = "timeout"
        except httpx.HTTPError:
            outcome = "error"
        if started >= measure_from:
            stats.add(outcome, time.monotonic() - started)
        await asyncio.sleep(think)


async def run_variant(settings: ScenarioSettings, breaker: bool, workdir: Path) -> VariantResult:
    """Start the service (with or without breaker), load both routes, return the measured part."""
    result = VariantResult(breaker)
    async with hanging_upstream() as upstream:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "cascadebreaker.demo.workerpool",
            "--port",
            str(port),
            "--upstream",
            upstream,
            "--workers",
            str(settings.workers),
            "--upstream-timeout",
            str(settings.upstream_timeout),
            "--failure-threshold",
            str(settings.failure_threshold),
            "--recovery-timeout",
            str(settings.recovery_timeout),
        ]
        if breaker:
            argv.append("--breaker")
        name = f"workerpool-{'breaker' if breaker else 'plain'}"
        service = ManagedProcess(
            name, argv, f"http://{HOST}:{port}/healthz", workdir / f"{name}.log"
        )
        service.spawn()
        try:
            await asyncio.to_thread(_wait_healthy, service)
            base = f"http://{HOST}:{port}"
            start = time.monotonic()
            measure_from = start + settings.warmup
            deadline = measure_from + settings.measure
            limits = httpx.Limits(max_connections=settings.slow_clients + settings.other_clients)
            async with httpx.AsyncClient(trust_env=False, limits=limits) as client:
                loops = [
                    _client_loop(
                        client,
                        f"{base}/slow-route",
                        settings.upstream_timeout + 30,
                        settings.think_time,
                        deadline,
                        measure_from,
                        result.routes["/slow-route"],
                    )
                    for _ in range(settings.slow_clients)
                ] + [
                    _client_loop(
                        client,
                        f"{base}/other",
                        settings.other_timeout,
                        settings.think_time,
                        deadline,
                        measure_from,
                        result.routes["/other"],
                    )
                    for _ in range(settings.other_clients)
                ]
                await asyncio.gather(*loops)
        finally:
            service.terminate()
            await asyncio.to_thread(service.wait_or_kill, time.monotonic() + 5)
    return result


def _wait_healthy(process: ManagedProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(trust_env=False, timeout=1.0) as client:
        while time.monotonic() < deadline:
            if not process.running:
                raise LaunchError(f"{process.name} exited:\n{process.log_tail()}")
            try:
                if client.get(process.health_url).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    raise LaunchError(f"{process.name} not healthy after {timeout:.0f}s")


async def run_scenario(settings: ScenarioSettings, workdir: Path) -> list[VariantResult]:
    """Both variants, one after the other: without the breaker, then with it."""
    return [await run_variant(settings, breaker, workdir) for breaker in (False, True)]


def report_rows(results: list[VariantResult]) -> list[dict[str, Any]]:
    """One row per variant and route, for printing or JSON."""
    return [
        {"variant": "breaker" if r.breaker else "no breaker", "route": route, **s.summary()}
        for r in results
        for route, s in r.routes.items()
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `ccb demo workerpool`."""
    defaults = ScenarioSettings()
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--upstream-timeout", type=float, default=defaults.upstream_timeout)
    parser.add_argument("--slow-clients", type=int, default=defaults.slow_clients)
    parser.add_argument("--other-clients", type=int, default=defaults.other_clients)
    parser.add_argument("--other-timeout", type=float, default=defaults.other_timeout)
    parser.add_argument("--warmup", type=float, default=defaults.warmup)
    parser.add_argument("--measure", type=float, default=defaults.measure)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    """`ccb demo workerpool`: run both variants and print the table."""
    import json
    import shutil
    import tempfile

    from rich.console import Console
    from rich.table import Table

    settings = ScenarioSettings(
        workers=args.workers,
        upstream_timeout=args.upstream_timeout,
        slow_clients=args.slow_clients,
        other_clients=args.other_clients,
        other_timeout=args.other_timeout,
        warmup=args.warmup,
        measure=args.measure,
    )
    workdir = Path(tempfile.mkdtemp(prefix="ccb-workerpool-"))
    console = Console()
    try:
        with console.status(
            f"running without and with a breaker (~{2 * (settings.warmup + settings.measure):.0f}s)"
        ):
            results = asyncio.run(run_scenario(settings, workdir))
    except LaunchError as exc:
        console.print(f"[red]{exc}[/red]")
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = report_rows(results)
    if args.json:
        print(json.dumps({"settings": asdict(settings), "rows": rows}, indent=2))
        return 0
    table = Table(
        title=f"{settings.workers} workers, upstream hangs, "
        f"{settings.slow_clients} callers on /slow-route, measured "
        f"{settings.measure:.0f}s after {settings.warmup:.0f}s warm-up"
    )
    for column in (
        "variant",
        "route",
        "requests",
        "ok",
        "timeouts",
        "errors",
        "rejected",
        "p50 ms",
        "p99 ms",
    ):
        table.add_column(column, justify="left" if column in ("variant", "route") else "right")
    for row in rows:
        table.add_row(
            row["variant"],
            row["route"],
            str(row["requests"]),
            str(row["ok"]),
            str(row["timeouts"]),
            str(row["errors"]),
            str(row["rejected"]),
            _ms(row["p50_ms"]),
            _ms(row["p99_ms"]),
        )
    console.print(table)
    console.print(
        f"/other failed {results[0].other_failures}x without a breaker and "
        f"{results[1].other_failures}x with one ({settings.other_timeout:.1f}s timeout)."
    )
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"

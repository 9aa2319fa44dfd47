"""Sidecar hop cost against direct calls, nginx, the Python floors and aiohttp, in one run.

    .venv/bin/python -m bench sidecar             # full run (~11 min), writes docs/benchmarks.md
    .venv/bin/python -m bench sidecar --quick     # one short round, prints only (or run.py)
    .venv/bin/python -m bench sidecar --compiled  # also the opt-in mypyc build, side by side

Exit status 1 when the py-spy profile could not be recorded (the tables say why in its place).

One fixed upstream (nginx answering a 13-byte body) behind: nothing (direct); the sidecar's
outbound listener; a client sidecar + a server sidecar (outbound -> inbound -> app, the mesh
shape); nginx as a reverse proxy, and two of them in a row (the pair's peer); the floors of any
Python proxy on uvloop (bench/sidecar/floor_proxies.py: a byte relay, a minimal httptools proxy
and two of those in a row); a minimal aiohttp reverse proxy. wrk (one thread) drives each
at 1 and 16 connections; a fixed-rate client drives 1000 rps; a grpcio client drives the gRPC
`Call` path. Rounds are interleaved (every cell once per round) so a noisy neighbour hurts all
cells alike; each number is the median over rounds. CPU seconds come from /proc per process
(schedstat's nanoseconds, split into user and system by the clock ticks: procs.CpuReading).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import platform
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import procs
from bench.sidecar.loadgen import LoadResult, grpc_calls, paced_http
from bench.sidecar.procs import Proc
from bench.sidecar.profile import Profile, ProfileError, profile_outbound
from bench.sidecar.report import (
    COMPILED,
    GRPC_FETCH,
    HTTPTOOLS_FLOOR,
    HTTPTOOLS_FLOOR_PAIR,
    RELAY_FLOOR,
    RELAY_FLOOR_PAIR,
    Cell,
    Report,
    Sample,
    failed_cells,
    render,
    write_section,
)
from bench.sidecar.wrk import WrkMissing, run_wrk, wrk_binary

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
CONNECTIONS = (1, 16)
PACED_RATE = 1000.0


@dataclass
class Scenario:
    """One way to reach the upstream, and the proxy processes whose CPU it costs."""

    name: str
    hops: int
    port: int
    path: str
    measured: list[Proc]


def _measure(
    measured: list[Proc], run: Callable[[], tuple[float, float, float, float, int, int]]
) -> Sample:
    before = {p.name: p.cpu_reading() for p in measured}
    p50, p90, p99, rps, requests, errors = run()
    spent = {p.name: p.cpu_reading().split(before[p.name]) for p in measured}
    cpu = {n: user + system for n, (user, system) in spent.items()}
    system = {n: sys_ for n, (_, sys_) in spent.items()}
    return Sample(p50, p90, p99, rps, requests, errors, cpu, system)


def _wrk_cell(s: Scenario, connections: int, seconds: float, workdir: Path) -> Sample:
    def run() -> tuple[float, float, float, float, int, int]:
        r = run_wrk(f"http://127.0.0.1:{s.port}{s.path}", connections, seconds, workdir)
        return r.p50, r.p90, r.p99, r.rps, r.requests, r.errors + r.status_errors

    return _measure(s.measured, run)


def _load_cell(measured: list[Proc], load: Callable[[], LoadResult]) -> Sample:
    def run() -> tuple[float, float, float, float, int, int]:
        r = load()
        return (
            r.percentile(50),
            r.percentile(90),
            r.percentile(99),
            r.rps,
            len(r.latencies_us),
            r.errors,
        )

    return _measure(measured, run)


def _on_loop(coro: Coroutine[Any, Any, LoadResult]) -> LoadResult:
    """Run a load generator on uvloop when installed (as the sidecar does)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _paced(s: Scenario, seconds: float) -> LoadResult:
    return _on_loop(paced_http("127.0.0.1", s.port, s.path, PACED_RATE, seconds))


def _grpc(port: int, connections: int, seconds: float) -> LoadResult:
    return _on_loop(grpc_calls(f"127.0.0.1:{port}", "payment", connections, seconds))


def start_processes(
    workdir: Path, started: dict[str, Proc], notes: list[str], compiled: Path | None = None
) -> list[Scenario]:
    """Start the upstream, the peers and the sidecars into `started` (filled as they come up,
    so the caller stops every one even when a later one fails); return the scenarios.

    `compiled`: an unpacked mypyc wheel; its sidecar and pair are measured beside the others."""
    up = started["upstream"] = procs.start_upstream(workdir)
    upstream_url = f"http://127.0.0.1:{up.port}"
    out = started["sidecar"] = procs.start_client_sidecar(workdir, upstream_url, "sidecar")
    server = started["sidecar-server"] = procs.start_server_sidecar(workdir, up.port)
    pair = started["sidecar-client"] = procs.start_client_sidecar(
        workdir, f"http://127.0.0.1:{server.port}", "sidecar-client"
    )
    nginx = started["nginx-proxy"] = procs.start_nginx_proxy(workdir, up.port)
    # The mesh shape with nginx at both ends: the peer of the sidecar pair.
    nginx_front = started["nginx-front"] = procs.start_nginx_proxy(
        workdir, nginx.port, "nginx-front"
    )
    scenarios = [
        Scenario("direct", 0, up.port, "/", []),
        Scenario("sidecar (outbound)", 1, out.port, "/payment/", [out]),
        Scenario("sidecar pair", 2, pair.port, "/payment/", [pair, server]),
        Scenario("nginx proxy", 1, nginx.port, "/", [nginx]),
        Scenario("nginx pair", 2, nginx_front.port, "/", [nginx_front, nginx]),
    ]
    if compiled is not None:
        c_out = started["sidecar-compiled"] = procs.start_client_sidecar(
            workdir, upstream_url, "sidecar-compiled", compiled
        )
        c_server = started["sidecar-server-compiled"] = procs.start_server_sidecar(
            workdir, up.port, "sidecar-server-compiled", compiled
        )
        c_pair = started["sidecar-client-compiled"] = procs.start_client_sidecar(
            workdir, f"http://127.0.0.1:{c_server.port}", "sidecar-client-compiled", compiled
        )
        scenarios += [
            Scenario("sidecar (outbound)" + COMPILED, 1, c_out.port, "/payment/", [c_out]),
            Scenario("sidecar pair" + COMPILED, 2, c_pair.port, "/payment/", [c_pair, c_server]),
        ]
    # The floors of any Python proxy on uvloop, measured like the sidecar (floor_proxies.py).
    relay = started["relay-floor"] = procs.start_floor_proxy(
        workdir, "relay", up.port, "relay-floor"
    )
    relay_front = started["relay-floor-front"] = procs.start_floor_proxy(
        workdir, "relay", relay.port, "relay-floor-front"
    )
    floor = started["httptools-floor"] = procs.start_floor_proxy(
        workdir, "httptools", up.port, "httptools-floor"
    )
    floor_front = started["httptools-floor-front"] = procs.start_floor_proxy(
        workdir, "httptools", floor.port, "httptools-floor-front"
    )
    scenarios += [
        Scenario(RELAY_FLOOR, 1, relay.port, "/", [relay]),
        Scenario(RELAY_FLOOR_PAIR, 2, relay_front.port, "/", [relay_front, relay]),
        Scenario(HTTPTOOLS_FLOOR, 1, floor.port, "/", [floor]),
        Scenario(HTTPTOOLS_FLOOR_PAIR, 2, floor_front.port, "/", [floor_front, floor]),
    ]
    try:
        aio = started["aiohttp-proxy"] = procs.start_aiohttp_proxy(workdir, up.port)
        scenarios.append(Scenario("aiohttp proxy", 1, aio.port, "/", [aio]))
    except procs.BenchSetupError as exc:
        notes.append(
            f"aiohttp proxy not measured ({str(exc).splitlines()[-1]}); pip install aiohttp"
        )
    started["grpc-floor"] = procs.start_grpc_floor(workdir)
    started["grpc-floor-fetch"] = procs.start_grpc_floor(workdir, up.port)
    return scenarios


def run_rounds(
    scenarios: list[Scenario], started: dict[str, Proc], rounds: int, seconds: float, workdir: Path
) -> Report:
    """Every cell once per round; wrk, then fixed rate, then gRPC."""
    report = Report(scenarios=[(s.name, s.hops, [p.name for p in s.measured]) for s in scenarios])
    for s in scenarios:  # warm pools and caches; not recorded
        run_wrk(f"http://127.0.0.1:{s.port}{s.path}", 16, 1, workdir)
    paced = [s for s in scenarios if s.name != "aiohttp proxy"]
    grpc_port = started["sidecar"].extra_ports["grpc"]
    for number in range(1, rounds + 1):
        print(f"round {number}/{rounds}", flush=True)
        for connections in CONNECTIONS:
            for s in scenarios:
                cell = report.wrk.setdefault((s.name, connections), Cell())
                cell.samples.append(_wrk_cell(s, connections, seconds, workdir))
        for s in paced:
            cell = report.paced.setdefault(s.name, Cell())
            cell.samples.append(_load_cell(s.measured, partial(_paced, s, seconds)))
        grpc_targets = [
            ("sidecar Call", started["sidecar"], grpc_port),
            ("empty grpc.aio server", started["grpc-floor"], started["grpc-floor"].port),
            (GRPC_FETCH, started["grpc-floor-fetch"], started["grpc-floor-fetch"].port),
        ]
        compiled = started.get("sidecar-compiled")
        if compiled is not None:  # its gRPC API over the compiled pipeline and upstream client
            grpc_targets.append(("sidecar Call" + COMPILED, compiled, compiled.extra_ports["grpc"]))
        for connections in CONNECTIONS:
            for name, proc, port in grpc_targets:
                cell = report.grpc.setdefault((name, connections), Cell())
                cell.samples.append(_load_cell([proc], partial(_grpc, port, connections, seconds)))
    report.peak_rss_mb = {name: p.peak_rss_mb() for name, p in started.items()}
    report.pss_mb = {name: p.pss_mb() for name, p in started.items()}
    report.grpc_listeners = tuple(
        name
        for name, p in started.items()
        if p.name.startswith("sidecar") and "grpc" in p.extra_ports
    )
    return report


@contextlib.contextmanager
def polling_idle(enabled: bool) -> Iterator[bool]:
    """Hold /dev/cpu_dma_latency at 0 so idle CPUs poll instead of halting (as cyclictest does).

    On a VM a halted vCPU takes tens of µs to wake, which a 1-connection ping-pong pays at every
    hop and which would swamp the sidecar's own cost. The request lapses when the file closes.
    Yields whether it is in force.
    """
    if not enabled:
        yield False
        return
    try:
        fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
    except OSError:
        yield False
        return
    try:
        os.write(fd, struct.pack("i", 0))
        yield True
    finally:
        os.close(fd)


def system_busy_seconds() -> tuple[float, float]:
    """CPU seconds spent busy by the whole machine so far (all CPUs, from /proc/stat), and of
    them the seconds stolen: a vCPU that was ready while the hypervisor ran someone else."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq + steal) / tick, steal / tick


def own_seconds(started: dict[str, Proc], since: os.times_result) -> float:
    """CPU seconds of this run: the live processes under test, plus this process and every
    child it already waited for (wrk, load generators, probes) since `since`."""
    now = os.times()
    mine = sum(
        getattr(now, f) - getattr(since, f)
        for f in ("user", "system", "children_user", "children_system")
    )
    return float(mine) + sum(p.cpu_seconds() for p in started.values())


def environment(rounds: int, seconds: float, load_before: float) -> dict[str, str]:
    """What the numbers were measured on."""
    wrk_version = "?"
    try:
        import subprocess

        wrk_version = subprocess.run(
            [wrk_binary(), "-v"], capture_output=True, text=True, check=False
        ).stdout.split()[1]
    except (OSError, IndexError, WrkMissing):
        pass
    try:
        loop = f"uvloop {importlib.metadata.version('uvloop')}"
    except importlib.metadata.PackageNotFoundError:
        loop = "asyncio"
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}{cpu_kind()}), "
        f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_version()} ({loop}); {python_speed()}",
        "tools": f"wrk {wrk_version} (1 thread), nginx {_nginx_version()} (1 process)",
        "method": f"{rounds} interleaved rounds x {seconds:g} s per cell; medians over rounds",
        "load average before the run": f"{load_before:.2f}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it ('?' when it does not)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def cpu_kind(
    cpuinfo: Path = Path("/proc/cpuinfo"), caches: Path = Path("/sys/devices/system/cpu/cpu0/cache")
) -> str:
    """`; family 6 model 167; L2 2 MiB, L3 480 MiB`: what tells two machines of one model name
    apart (the sidecar's cold-cache cost moves with the caches); empty when not readable."""
    fields: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
            if not line.strip():  # the first CPU's block is enough
                break
    except OSError:
        pass
    parts = []
    if "cpu family" in fields and "model" in fields:
        parts.append(f"family {fields['cpu family']} model {fields['model']}")
    sizes = []
    for level in (2, 3):
        for index in sorted(caches.glob("index*")):
            try:
                if int((index / "level").read_text()) != level:
                    continue
                size = (index / "size").read_text().strip()
            except (OSError, ValueError):
                continue
            sizes.append(f"L{level} {_cache_size(size)}")
            break
    if sizes:
        parts.append(", ".join(sizes))
    return "".join(f"; {part}" for part in parts)


def _cache_size(size: str) -> str:
    """sysfs's `2048K` -> `2 MiB`, `491520K` -> `480 MiB`, `512K` -> `512 KiB`."""
    if size.endswith("K") and size[:-1].isdigit():
        kib = int(size[:-1])
        return f"{kib // 1024} MiB" if kib % 1024 == 0 else f"{kib} KiB"
    return size


def python_speed() -> str:
    """A yardstick for comparing runs made on different machines: the interpreter's time for
    one small loop (the sidecar's costs move with it more than nginx's do)."""
    import timeit

    best = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000
    return f"{best * 1e6:.1f} µs per sum(range(1000))"


def _nginx_version() -> str:
    import subprocess

    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    try:
        text = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False).stderr
    except OSError:
        return "?"
    return text.strip().rsplit("/", 1)[-1]


_IDLE_TEXT = {
    "halting": "default idle states (a halted vCPU's wake-up is in every 1-connection number)",
    "polling": "idle CPUs polling (/dev/cpu_dma_latency held at 0: no vCPU halt/wake latency)",
}


def main(argv: list[str] | None = None) -> int:
    """Run the sidecar benchmark, print the tables, and record them in docs/benchmarks.md."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per cell per round")
    parser.add_argument(
        "--quick", action="store_true", help="1 round of 1 s, a 2 s profile; no doc write"
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profile")
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="also build the opt-in compiled wheel (mypyc, profile-guided, as "
        "scripts/build-compiled does: needs a C compiler, ~4 min) and measure it",
    )
    parser.add_argument(
        "--idle",
        choices=("both", "halting", "polling"),
        default="both",
        help="CPU idle states: the default ones (halting), idle CPUs polling "
        "(/dev/cpu_dma_latency held at 0), or both, one after the other (default)",
    )
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file to update")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.no_write = 1, 1.0, True
        if args.idle == "both":
            args.idle = "halting"
    try:
        wrk_binary()
    except WrkMissing as exc:
        print(f"bench sidecar: {exc}", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    notes: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="ccb-bench-sidecar-"))
    started: dict[str, Proc] = {}
    profile: Profile | None = None
    profile_error = ""
    (busy_before, steal_before), times_before = system_busy_seconds(), os.times()
    wall_before = time.monotonic()
    modes = ["halting", "polling"] if args.idle == "both" else [args.idle]
    reports: dict[str, Report] = {}
    try:
        compiled = None
        if args.compiled:
            from bench.sidecar.pgo import build

            try:  # the wheel that ships: scripts/build-compiled's, profile-guided
                compiled = build(workdir / "compiled")
            except RuntimeError as exc:  # no compiler, or mypyc refused the code
                raise procs.BenchSetupError(f"--compiled: {exc}") from exc
        scenarios = start_processes(workdir, started, notes, compiled)
        for mode in modes:
            print(f"CPU idle: {mode}", flush=True)
            with polling_idle(mode == "polling") as polling:
                if mode == "polling" and not polling:
                    notes.append("idle CPUs could not be held polling (/dev/cpu_dma_latency)")
                    continue
                reports[mode] = run_rounds(scenarios, started, args.rounds, args.seconds, workdir)
        if not args.no_profile:
            try:
                seconds = 2.0 if args.quick else 5.0  # the smoke run checks the profile too
                profile = profile_outbound(workdir, started["upstream"].port, seconds)
            except ProfileError as exc:
                profile_error = str(exc)
                print(f"bench sidecar: the profile FAILED: {exc}", file=sys.stderr, flush=True)
        # CPU the rest of the machine used meanwhile: the noise on these numbers.
        busy_after, steal_after = system_busy_seconds()
        wall = time.monotonic() - wall_before
        foreign = busy_after - busy_before - own_seconds(started, times_before)
        foreign_share = max(foreign, 0.0) / wall
        steal_share = max(steal_after - steal_before, 0.0) / wall
    except procs.BenchSetupError as exc:
        print(f"bench sidecar: {exc}", file=sys.stderr)
        return 1
    finally:
        for proc in reversed(started.values()):
            proc.stop()
    report = reports[modes[0]]
    failed = [f for r in reports.values() for f in failed_cells(r)]
    if failed:
        notes.append("Cells with errors (their numbers are not valid): " + "; ".join(failed))
    report.import_rss_mb = procs.import_rss_mb()
    report.notes = notes
    report.profile = profile
    report.profile_error = profile_error
    report.environment = environment(args.rounds, args.seconds, load_before)
    report.environment["load average after the run"] = f"{os.getloadavg()[0]:.2f}"
    report.environment["CPU idle"] = _IDLE_TEXT[modes[0]] + (
        "; then again with " + _IDLE_TEXT[modes[1]] + " (the section at the end)"
        if len(modes) > 1
        else ""
    )
    report.environment["CPU used by other processes during the run"] = (
        f"{foreign_share:.2f} CPUs (stolen by the hypervisor: {steal_share:.2f})"
    )
    report.other_cpus = foreign_share
    if len(modes) > 1 and modes[1] in reports:
        report.other_idle = (_IDLE_TEXT[modes[1]], reports[modes[1]])
    markdown = render(report)
    print(markdown)
    if not args.no_write:
        write_section(args.doc, markdown)
        print(f"wrote the '## Sidecar' section of {args.doc}")
    shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        print(f"bench sidecar: errors in {len(failed)} cells: {'; '.join(failed)}", file=sys.stderr)
        return 1
    if profile_error:  # the tables stand; the missing profile must not pass unnoticed
        print(
            f"bench sidecar: the profile FAILED ({profile_error}); the tables say so in its "
            "place. --no-profile skips it.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

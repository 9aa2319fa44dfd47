"""System calls per proxied request, counted by strace: the sidecar beside nginx and the floors.

    python -m bench.sidecar.syscalls [--src TREE] [-n N]
    python -m bench.sidecar.syscalls --grpc [--src TREE]   # per gRPC Call, beside grpc's floors

Each proxy serves N requests in turn on one keep-alive connection (the same client as
bench/sidecar/instructions.py) while `strace -c -f` is attached to it (start-up and warm-up
not counted); the table gives each system call's count per request. With the instruction
counts (bench/sidecar/instructions.py) this splits a proxy's cost: what it asks of the kernel
and what it runs in user space. Like instruction counts, the counts do not move with the
machine's load (their times do, and are not shown).
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.sidecar import instructions, procs

_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$")


def parse_summary(text: str) -> dict[str, int]:
    """`strace -c` output read into calls per system call (errors counted as calls)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match is not None and match.group(3) != "total":
            calls[match.group(3)] = calls.get(match.group(3), 0) + int(match.group(1))
    return calls


def _count(
    process: subprocess.Popen[bytes], port: int, n: int, out: Path, grpc: bool = False
) -> dict[str, float]:
    drive = instructions._drive_grpc if grpc else instructions._http_driver(instructions._REQUEST)
    instructions._wait_ready(port, process, drive)
    drive(port, 200)  # warm: connections open, caches filled
    tracer = subprocess.Popen(
        ["strace", "-c", "-f", "-p", str(process.pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)  # strace attaches to every thread before the first request
        drive(port, n)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=60)
    calls = parse_summary(out.read_text())
    if not calls:
        raise RuntimeError(f"strace counted nothing for pid {process.pid}: {out.read_text()}")
    return {name: total / n for name, total in calls.items()}


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main(argv: list[str] | None = None) -> int:
    """Print system calls per request for the sidecar, nginx and the floors."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", default=str(instructions.HERE / "src"), help="a source tree")
    parser.add_argument("-n", type=int, default=2000, help="requests counted")
    parser.add_argument("--grpc", action="store_true", help="per gRPC Call, not per request")
    args = parser.parse_args(argv)
    for tool, package in (("strace", "strace"), ("nginx", "nginx-light")):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            print(f"bench syscalls: {tool} is not installed (apt-get install {package})")
            return 1
    workdir = Path(tempfile.mkdtemp(prefix="ccb-bench-syscalls-"))
    if args.grpc:
        for line in render(grpc_rows(workdir, args.src, args.n), args.n, "gRPC Call", "server"):
            print(line)
        return 0
    upstream = procs.start_upstream(workdir)
    rows: list[tuple[str, dict[str, float]]] = []
    try:
        port = procs.free_port()
        command = instructions.sidecar_argv(workdir, args.src, upstream.port, port, "counted")
        process = subprocess.Popen(command, cwd=workdir)
        try:
            rows.append(("sidecar", _count(process, port, args.n, workdir / "sidecar.strace")))
        finally:
            _stop(process)
        nginx = procs.start_nginx_proxy(workdir, upstream.port)
        try:
            out = workdir / "nginx.strace"
            rows.append(("nginx proxy", _count(nginx.process, nginx.port, args.n, out)))
        finally:
            nginx.stop()
        for kind, label in (("httptools", "minimal httptools proxy"), ("relay", "uvloop relay")):
            port = procs.free_port()
            process = subprocess.Popen(instructions.floor_argv(kind, upstream.port, port))
            try:
                rows.append((label, _count(process, port, args.n, workdir / f"{kind}.strace")))
            finally:
                _stop(process)
    finally:
        upstream.stop()
    for line in render(rows, args.n):
        print(line)
    return 0


def grpc_rows(workdir: Path, src: str, n: int) -> list[tuple[str, dict[str, float]]]:
    """System calls per gRPC Call: the sidecar's listener, the grpc.aio server making the bare
    upstream GET, and the empty grpc.aio server (bench/sidecar/grpc_floor.py)."""
    upstream = procs.start_upstream(workdir)
    rows: list[tuple[str, dict[str, float]]] = []
    try:
        port = procs.free_port()
        servers = [
            (
                "sidecar Call",
                instructions.sidecar_argv(workdir, src, upstream.port, port, "g", listener="grpc"),
            ),
            (
                "grpc.aio server + bare upstream GET",
                [*instructions.grpc_floor_argv(port), str(upstream.port)],
            ),
            ("empty grpc.aio server", instructions.grpc_floor_argv(port)),
        ]
        for label, command in servers:
            process = subprocess.Popen(command, cwd=workdir)
            try:
                out = workdir / f"{len(rows)}.strace"
                rows.append((label, _count(process, port, n, out, grpc=True)))
            finally:
                _stop(process)
    finally:
        upstream.stop()
    return rows


def render(
    rows: list[tuple[str, dict[str, float]]], n: int, unit: str = "request", who: str = "proxy"
) -> list[str]:
    """A markdown table: one row per proxy, one column per system call seen once per request
    or more by any of them, and the total."""
    names = sorted({name for _, calls in rows for name, per in calls.items() if per >= 0.5})
    lines = [
        f"system calls per {unit} (strace -c, n={n}):",
        "",
        f"| {who} | " + " | ".join(names) + " | all |",
        "|---|" + "--:|" * (len(names) + 1),
    ]
    for label, calls in rows:
        cells = [f"{calls.get(name, 0.0):.2f}" for name in names]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {sum(calls.values()):.2f} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())

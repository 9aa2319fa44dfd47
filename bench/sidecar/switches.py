"""Context switches and CPU per gRPC Call, by thread: the sidecar beside grpc's floors.

    python -m bench.sidecar.switches [--src TREE] [-n N] [--rounds R]

Each server (the sidecar's gRPC listener, the grpc.aio server making the bare upstream GET,
the empty grpc.aio server; bench/sidecar/grpc_floor.py) answers N `Call`s in turn on one
channel (the client of bench/sidecar/instructions.py, timed here). Before and after, every
thread's context switches and CPU ticks are read from /proc: a thread that sleeps and is woken
once more per Call than the floor's shows one more voluntary switch per Call. With idle vCPUs
halting, every such wake-up costs tens of µs that neither instruction counts nor system call
counts show (bench/sidecar/instructions.py, bench/sidecar/syscalls.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.sidecar import instructions, procs


@dataclass(frozen=True)
class ThreadTally:
    """One thread's counters from /proc/PID/task/TID: switches and CPU (clock ticks)."""

    name: str
    voluntary: int
    involuntary: int
    ticks: int


def read_tally(status: str, stat: str) -> ThreadTally:
    """A thread's counters from the text of its `status` and `stat` files."""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    after_name = stat.rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses
    return ThreadTally(
        fields["Name"].strip(),
        int(fields["voluntary_ctxt_switches"]),
        int(fields["nonvoluntary_ctxt_switches"]),
        int(after_name[11]) + int(after_name[12]),  # utime + stime
    )


def tallies(pid: int) -> dict[str, ThreadTally]:
    """Every live thread of `pid` by thread id."""
    found: dict[str, ThreadTally] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        found[tid] = read_tally(status, stat)
    return found


def per_call(
    before: dict[str, ThreadTally], after: dict[str, ThreadTally], n: int
) -> list[tuple[str, float, float, float]]:
    """(thread name, voluntary, involuntary switches, CPU µs) per Call, for the threads that
    switched at least once every 20 Calls (idle pool threads left out), busiest first."""
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    rows = []
    for tid, now in after.items():
        then = before.get(tid, ThreadTally(now.name, 0, 0, 0))
        voluntary = (now.voluntary - then.voluntary) / n
        involuntary = (now.involuntary - then.involuntary) / n
        if voluntary + involuntary >= 0.05:
            rows.append((now.name, voluntary, involuntary, (now.ticks - then.ticks) * tick_us / n))
    return sorted(rows, key=lambda row: -row[3])


def _timed_calls(port: int, n: int) -> float:
    """Make `n` Calls in turn; their median latency in µs."""
    import grpc

    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = sidecar_pb2_grpc.SidecarStub(channel)  # type: ignore[no-untyped-call]
        request = pb.CallRequest(upstream="payment", method="GET", path="/")
        took = []
        for _ in range(n):
            start = time.perf_counter()
            stub.Call(request, timeout=60)
            took.append(time.perf_counter() - start)
    return statistics.median(took) * 1e6


def measure(label: str, command: list[str], port: int, n: int, workdir: Path) -> list[str]:
    """One server's rows: its p50, then each busy thread's switches and CPU per Call."""
    process = subprocess.Popen(command, cwd=workdir)
    try:
        instructions._wait_ready(port, process, instructions._drive_grpc)
        instructions._drive_grpc(port, 300)  # warm: channel open, caches filled
        before = tallies(process.pid)
        p50 = _timed_calls(port, n)
        after = tallies(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return [
        f"| {label} | {p50:.0f} | {name} | {voluntary:.2f} | {involuntary:.2f} | {cpu:.0f} |"
        for name, voluntary, involuntary, cpu in per_call(before, after, n)
    ]


def servers(
    workdir: Path, src: str, upstream_port: int
) -> list[tuple[str, Callable[[int], list[str]]]]:
    """Each server's label and its command for a port (as bench/sidecar/syscalls.py's)."""
    return [
        (
            "sidecar Call",
            lambda port: instructions.sidecar_argv(
                workdir, src, upstream_port, port, "g", listener="grpc"
            ),
        ),
        (
            "grpc.aio server + bare upstream GET",
            lambda port: [*instructions.grpc_floor_argv(port), str(upstream_port)],
        ),
        ("empty grpc.aio server", instructions.grpc_floor_argv),
    ]


def main(argv: list[str] | None = None) -> int:
    """Print the table: per server and busy thread, switches and CPU per Call."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", default=str(instructions.HERE / "src"), help="a source tree")
    parser.add_argument("-n", type=int, default=3000, help="Calls per server and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, servers interleaved")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="ccb-bench-switches-"))
    upstream = procs.start_upstream(workdir)
    lines = [
        f"context switches and CPU per gRPC Call, by thread (/proc, n={args.n}):",
        "",
        "| server | p50 µs | thread | voluntary | involuntary | CPU µs |",
        "|---|--:|---|--:|--:|--:|",
    ]
    try:
        for _ in range(args.rounds):
            for label, command in servers(workdir, args.src, upstream.port):
                port = procs.free_port()
                lines += measure(label, command(port), port, args.n, workdir)
    finally:
        upstream.stop()
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

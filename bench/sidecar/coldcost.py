"""What cold caches cost a request: a proxy's CPU per request with its caches warm, and with
them flushed before each request.

    .venv/bin/python -m bench.sidecar.coldcost --src TREE [-n 200] [--rounds 3]

At a fixed 1000 rps a request arrives after a millisecond in which other processes ran: it
finds the caches cold and pays for every line of code and data it touches again. The sidecar
touches more lines per request than the floor proxy (`bench.sidecar.footprint --cold`) in about
the same instructions, so the gap between them should open when the caches are cold and close
when they are warm. This measures both states on the same processes, one request at a time:

- the proxies (nginx, the minimal httptools floor, the sidecar of TREE) on CPU 0, the client
  and the upstream nginx on CPU 1;
- warm: a request right after one of its own on the same keep-alive connection;
- cold: a request right after a process on CPU 0 copied a buffer twice the last-level cache
  (L1, L2 and the L3 evicted, the kernel's lines too, as other processes' work does);
- a request's CPU: the proxy's on-CPU time from the scheduler (`/proc/PID/task/*/schedstat`,
  to the nanosecond), read before the request and once the proxy sleeps again.

Medians over `rounds` x `n` requests per proxy and state; proxies and states take turns at
every step, so that the machine's drift (a shared host's, minutes long) falls on all alike.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import procs
from bench.sidecar.run import polling_idle

BODY = b"hello, world\n"  # the upstream's body (procs.start_upstream)
PROXY_CPU, OTHER_CPU = 0, 1
SETTLE = 0.002  # after a response, for the proxy to go back to sleep (its time is then counted)
_THRASHER = """
import sys
size = int(sys.argv[1])
source = bytearray(b"\\x5a") * size  # written: real pages, not the shared zero page
target = bytearray(size)
while sys.stdin.buffer.read(1):
    target[:] = source
    sys.stdout.buffer.write(b".")
    sys.stdout.buffer.flush()
"""


@dataclass(frozen=True)
class Row:
    """One proxy's median CPU per request, warm and cold, in microseconds."""

    proxy: str
    warm: float
    cold: float
    samples: int

    @property
    def added(self) -> float:
        """What cold caches add to a request."""
        return self.cold - self.warm


def summarize(samples: dict[str, dict[str, list[float]]]) -> list[Row]:
    """Rows from per-request CPU seconds by proxy and state ('warm', 'cold')."""
    return [
        Row(
            proxy,
            statistics.median(states["warm"]) * 1e6,
            statistics.median(states["cold"]) * 1e6,
            min(len(states["warm"]), len(states["cold"])),
        )
        for proxy, states in samples.items()
    ]


def render(rows: list[Row], floor: str, label: str) -> list[str]:
    """A markdown table, and each proxy's difference from the floor warm and cold."""
    lines = [
        f"CPU per request, caches warm and flushed before each request ({label}):",
        "",
        "| proxy | warm µs | cold µs | cold adds µs | requests per state |",
        "|---|--:|--:|--:|--:|",
    ]
    lines += [
        f"| {r.proxy} | {r.warm:.1f} | {r.cold:.1f} | {r.added:.1f} | {r.samples} |" for r in rows
    ]
    base = next((r for r in rows if r.proxy == floor), None)
    if base is not None:
        lines += ["", f"| above {floor} | warm µs | cold µs |", "|---|--:|--:|"]
        lines += [
            f"| {r.proxy} | {r.warm - base.warm:+.1f} | {r.cold - base.cold:+.1f} |"
            for r in rows
            if r is not base
        ]
    return lines


def pin(pid: int, cpu: int) -> None:
    """Every thread of `pid` on `cpu` (a process's affinity is per thread)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})


def last_level_cache_bytes() -> int:
    """The largest cache of CPU 0 (sysfs), 32 MiB when sysfs does not say."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        text = (index / "size").read_text().strip() if (index / "size").exists() else ""
        if text.endswith("K"):
            sizes.append(int(text[:-1]) * 1024)
        elif text.endswith("M"):
            sizes.append(int(text[:-1]) * 1024 * 1024)
    return max(sizes, default=32 * 1024 * 1024)


class Thrasher:
    """A process on the proxies' CPU that evicts every cache level when asked."""

    def __init__(self, size: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _THRASHER, str(size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        pin(self.process.pid, PROXY_CPU)

    def flush(self) -> None:
        """Copy the buffer once; return when it is done."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(b".")
        self.process.stdin.flush()
        if self.process.stdout.read(1) != b".":
            raise procs.BenchSetupError("the cache thrasher died")

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=10)


class Client:
    """One keep-alive connection; a request at a time, its response read to the body's end."""

    def __init__(self, port: int, path: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = f"GET {path} HTTP/1.1\r\nhost: bench\r\n\r\n".encode()

    def get(self) -> None:
        self.sock.sendall(self.request)
        received = b""
        while not received.endswith(BODY):
            data = self.sock.recv(65536)
            if not data:
                raise procs.BenchSetupError("the proxy closed the connection")
            received += data
        if not received.startswith(b"HTTP/1.1 200"):
            raise procs.BenchSetupError(f"not a 200: {received[:60]!r}")


def request_cpu(proxy: procs.Proc, client: Client) -> float:
    """The proxy's CPU seconds for one request."""
    before = proxy.cpu_reading().exact
    client.get()
    time.sleep(SETTLE)
    after = proxy.cpu_reading().exact
    if before is None or after is None:
        raise procs.BenchSetupError("no scheduler statistics (/proc/PID/task/*/schedstat)")
    return after - before


def measure(tree: Path, n: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per-request CPU seconds of each proxy, warm and cold."""
    if len(os.sched_getaffinity(0)) < 2:
        raise procs.BenchSetupError("needs 2 CPUs: the proxies on one, the client on the other")
    workdir = Path(tempfile.mkdtemp(prefix="ccb-coldcost-"))
    started: list[procs.Proc] = []
    thrasher = None
    try:
        upstream = procs.start_upstream(workdir)
        started.append(upstream)
        port = upstream.port
        nginx = procs.start_nginx_proxy(workdir, port)
        started.append(nginx)
        floor = procs.start_floor_proxy(workdir, "httptools", port, "floor")
        started.append(floor)
        sidecar = procs.start_client_sidecar(workdir, f"http://127.0.0.1:{port}", "sidecar", tree)
        started.append(sidecar)
        os.sched_setaffinity(0, {OTHER_CPU})
        pin(upstream.process.pid, OTHER_CPU)
        proxies = {
            "nginx proxy": (nginx, Client(nginx.port, "/")),
            "floor: minimal httptools proxy": (floor, Client(floor.port, "/")),
            "sidecar (compiled build)": (sidecar, Client(sidecar.port, "/payment/")),
        }
        for proxy, _ in proxies.values():
            pin(proxy.process.pid, PROXY_CPU)
        thrasher = Thrasher(2 * last_level_cache_bytes())
        samples: dict[str, dict[str, list[float]]] = {
            name: {"warm": [], "cold": []} for name in proxies
        }
        for _, client in proxies.values():  # warm-up: connections, pools, caches
            for _ in range(50):
                client.get()
        for round_ in range(rounds):
            names = list(proxies)
            names = names[round_ % len(names) :] + names[: round_ % len(names)]
            for _ in range(n):  # the proxies in turn at every step: drift falls on all alike
                for name in names:
                    proxy, client = proxies[name]
                    client.get()  # warm: the request right after one of its own
                    time.sleep(SETTLE)
                    samples[name]["warm"].append(request_cpu(proxy, client))
                    thrasher.flush()
                    samples[name]["cold"].append(request_cpu(proxy, client))
        return samples
    finally:
        if thrasher is not None:
            thrasher.stop()
        for proc in reversed(started):
            proc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", required=True, help="the compiled tree (pgo.build's src/)")
    parser.add_argument("-n", type=int, default=200, help="requests per proxy, state and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--idle",
        choices=("halting", "polling"),
        default="halting",
        help="idle CPUs halt (the default) or poll (/dev/cpu_dma_latency held at 0)",
    )
    args = parser.parse_args(argv)
    tree = Path(args.src).resolve()
    with polling_idle(args.idle == "polling") as polling:
        if args.idle == "polling" and not polling:
            raise procs.BenchSetupError("could not hold idle CPUs polling (/dev/cpu_dma_latency)")
        rows = summarize(measure(tree, args.n, args.rounds))
    label = f"{tree}, idle CPUs {args.idle}"
    print("\n".join(render(rows, "floor: minimal httptools proxy", label)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

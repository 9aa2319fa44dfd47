"""Instructions per proxied request, counted by callgrind: a measure a busy machine cannot skew.

    .venv/bin/python -m bench.sidecar.instructions                  # this checkout, and nginx
    .venv/bin/python -m bench.sidecar.instructions --src OTHER/src --label main --write
                                                    # and another tree, same run, into the docs
    .venv/bin/python -m bench.sidecar.instructions --grpc [--src OTHER/src --label main] [--write]
                                                    # per gRPC Call: the sidecar, the empty server

A proxy (the sidecar's outbound listener, or an nginx reverse proxy: the peer) runs under
`valgrind --tool=callgrind` in front of an nginx upstream that is not counted. A client outside
valgrind sends N requests one after another on one keep-alive connection, and the proxy is
stopped (SIGTERM; callgrind counts up to the exit). The same is done with 2N requests; the
difference divided by N is the cost of one request, start-up and shutdown cancelled out. The
floor proxies (bench/sidecar/floor_proxies.py) give the floor of any Python proxy on the same
event loop: a uvloop byte relay (no HTTP at all) and a minimal httptools proxy (parse both ways,
no logic); `python -m bench sidecar` runs the same two beside nginx in wall time.

With `--grpc` the same is done for the gRPC `Call`: a grpcio client outside valgrind calls the
sidecar's gRPC listener (which calls the upstream), and the empty grpc.aio server of
bench/sidecar/grpc_floor.py (which answers at once): the difference is the sidecar's own work
per Call, grpc's cost cancelled out. The empty server making a bare upstream GET first shows
what awaiting the upstream costs a grpc.aio handler by itself.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import procs

HERE = Path(__file__).resolve().parents[2]
DOC = HERE / "docs" / "benchmarks.md"
SECTION = "## Sidecar: instructions per request"
GRPC_SECTION = "## Sidecar: instructions per gRPC Call"
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
_REQUEST = b"GET /payment/ HTTP/1.1\r\nhost: bench\r\nuser-agent: bench\r\naccept: */*\r\n\r\n"


def _drive(port: int, n: int, request: bytes) -> None:
    """Send `n` requests in turn on one keep-alive connection; each answer read whole."""
    with _connect(port) as s:
        for _ in range(n):
            _exchange(s, request)


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _exchange(s: socket.socket, request: bytes) -> None:
    """One request, its answer read whole."""
    s.sendall(request)
    got = b""
    while not got.endswith(procs.BODY.encode()):
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError(f"connection closed after {got!r}")
        got += chunk
    if not got.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected answer {got[:200]!r}")


class KeptConnection:
    """A driver whose connection outlives each call: a profile window then holds the requests
    alone, not a connection's set-up and teardown (which `_drive` amortises over n)."""

    def __init__(self, request: bytes = b"") -> None:
        self.request = request or _REQUEST
        self.sockets: dict[int, socket.socket] = {}

    def __call__(self, port: int, n: int) -> None:
        s = self.sockets.get(port)
        if s is None:
            s = self.sockets[port] = _connect(port)
        for _ in range(n):
            _exchange(s, self.request)

    def close(self) -> None:
        for s in self.sockets.values():
            s.close()
        self.sockets.clear()


def _drive_grpc(port: int, n: int) -> None:
    """`n` Sidecar.Call in turn on one channel (a fresh one each time: no state carried)."""
    import grpc

    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = sidecar_pb2_grpc.SidecarStub(channel)  # type: ignore[no-untyped-call]
        request = pb.CallRequest(upstream="payment", method="GET", path="/")
        for _ in range(n):
            try:
                response = stub.Call(request, timeout=60)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:  # not listening yet
                    raise OSError(str(exc)) from exc
                raise
            if response.status != 200 or response.body != procs.BODY.encode():
                raise RuntimeError(f"unexpected answer {response!r}")


Driver = Callable[[int, int], None]  # (port, n): make n calls


def _http_driver(request: bytes) -> Driver:
    return lambda port, n: _drive(port, n, request)


def _wait_ready(port: int, process: subprocess.Popen[bytes], drive: Driver) -> None:
    deadline = time.monotonic() + 300  # start-up under valgrind is slow
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the proxy under valgrind exited during start-up")
        try:
            drive(port, 1)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the proxy under valgrind did not answer within 300 s")


def count(argv: list[str], port: int, n: int, request: bytes | Driver, env: dict[str, str]) -> int:
    """Instructions callgrind counts for the proxy `argv` serving 1 + n requests (HTTP
    `request`s, or calls a `Driver` makes)."""
    drive = _http_driver(request) if isinstance(request, bytes) else request
    with tempfile.TemporaryDirectory(prefix="ccb-instr-") as tmp:
        out = Path(tmp) / "valgrind.log"
        with out.open("wb") as log:
            process = subprocess.Popen(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--callgrind-out-file=/dev/null",
                    # `ccb sidecar` validates, then execs the serving process: count both.
                    "--trace-children=yes",
                    f"--log-file={out}",
                    *argv,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONHASHSEED": "0", **env},
                cwd=tmp,
            )
        try:
            _wait_ready(port, process, drive)
            drive(port, n)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # One count per program image (before and after an exec); their sum is the process's.
        counts = _COLLECTED.findall(out.read_text(errors="replace"))
        if not counts:
            raise RuntimeError(f"no instruction count in: {out.read_text()[-800:]}")
        return sum(int(c) for c in counts)


def per_request(
    argv: list[str], port: int, n: int, request: bytes | Driver, env: dict[str, str]
) -> float:
    """Instructions of one proxied request (start-up cancelled by serving n and 2n)."""
    return (count(argv, port, 2 * n, request, env) - count(argv, port, n, request, env)) / n


def sidecar_argv(
    workdir: Path,
    src: str,
    upstream: int,
    port: int,
    label: str,
    cascade: bool = True,
    listener: str = "outbound",
) -> list[str]:
    """`ccb sidecar` from the source tree `src`: one listener (outbound, or grpc), no admin."""
    listen: dict[str, str | None] = {"outbound": None, "inbound": None, "grpc": None}
    listen[listener] = f"127.0.0.1:{port}"
    config: dict[str, object] = {
        "service": "checkout",
        "listen": {**listen, "admin": None},
        "upstreams": {"payment": {"url": f"http://127.0.0.1:{upstream}", "timeout": 30.0}},
        "log_level": "warning",
    }
    if not cascade:
        config["cascade"] = {"enabled": False}
    path = workdir / f"{label}.yaml"
    path.write_text(yaml.safe_dump(config))
    # PYTHONPATH, not only sys.path: the serving process `ccb sidecar` execs imports that tree.
    code = (
        f"import os, sys; sys.path.insert(0, {src!r}); "
        f"os.environ['PYTHONPATH'] = {src!r}; "
        "from cascadebreaker.cli import main; sys.exit(main())"
    )
    return [sys.executable, "-c", code, "sidecar", "--config", str(path)]


def nginx_argv(workdir: Path, upstream: int, port: int) -> list[str]:
    root = workdir / f"nginx-{port}"
    root.mkdir()
    conf = root / "nginx.conf"
    servers = procs._NGINX_PROXY.format(port=port, upstream=upstream)
    conf.write_text(procs._NGINX_MAIN.format(dir=root, servers=servers))
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    return [binary, "-p", str(root), "-c", str(conf), "-e", "stderr"]


def floor_argv(kind: str, upstream: int, port: int) -> list[str]:
    """One of the floor proxies (bench/sidecar/floor_proxies.py): `relay` or `httptools`."""
    return [sys.executable, str(procs.FLOOR_PROXIES), kind, str(port), str(upstream)]


def grpc_floor_argv(port: int) -> list[str]:
    return [sys.executable, str(HERE / "bench" / "sidecar" / "grpc_floor.py"), str(port)]


def main(argv: list[str] | None = None) -> int:
    """Print instructions per proxied request for each proxy, and record them if asked."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", action="append", default=[], help="another source tree (src/)")
    parser.add_argument("--label", action="append", default=[], help="a name for each --src")
    parser.add_argument("--write", action="store_true", help="record the table in the docs")
    parser.add_argument("-n", type=int, default=2000, help="requests (the run does n and 2n)")
    parser.add_argument("--no-peers", action="store_true", help="only the sidecar tree(s)")
    parser.add_argument("--grpc", action="store_true", help="per gRPC Call, not per request")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench instructions: valgrind is not installed (apt-get install valgrind)")
        return 1
    if args.grpc:
        return grpc_main(args)
    workdir = Path(tempfile.mkdtemp(prefix="ccb-bench-instr-"))
    upstream = procs.start_upstream(workdir)
    rows: list[tuple[str, float]] = []
    try:
        trees = [str(HERE / "src"), *args.src]
        labels = ["sidecar (this checkout)", *[f"sidecar ({name})" for name in args.label]]
        labels += [f"sidecar ({t})" for t in args.src[len(args.label) :]]
        for label, tree in zip(labels, trees, strict=True):
            port = procs.free_port()
            command = sidecar_argv(workdir, tree, upstream.port, port, f"s{len(rows)}")
            rows.append((label, per_request(command, port, args.n, _REQUEST, {})))
            print(f"{label}: {rows[-1][1]:,.0f}", flush=True)
        if not args.no_peers:
            port = procs.free_port()
            command = sidecar_argv(workdir, trees[0], upstream.port, port, "nc", cascade=False)
            rows.append(
                ("sidecar, cascade disabled", per_request(command, port, args.n, _REQUEST, {}))
            )
            print(f"{rows[-1][0]}: {rows[-1][1]:,.0f}", flush=True)
            port = procs.free_port()
            command = nginx_argv(workdir, upstream.port, port)
            rows.append(("nginx proxy", per_request(command, port, args.n, _REQUEST, {})))
            print(f"nginx proxy: {rows[-1][1]:,.0f}", flush=True)
            port = procs.free_port()
            command = floor_argv("relay", upstream.port, port)
            rows.append(("uvloop byte relay", per_request(command, port, args.n, _REQUEST, {})))
            print(f"uvloop byte relay: {rows[-1][1]:,.0f}", flush=True)
            port = procs.free_port()
            command = floor_argv("httptools", upstream.port, port)
            label = "minimal httptools proxy (parse both ways, no logic)"
            rows.append((label, per_request(command, port, args.n, _REQUEST, {})))
            print(f"{label}: {rows[-1][1]:,.0f}", flush=True)
    finally:
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    table = render(rows)
    print(f"\ninstructions per proxied request (callgrind, n={args.n}):\n")
    print("\n".join(table))
    if args.write:
        from bench.core.report import write_section

        section = [
            SECTION,
            "",
            "Instructions one proxied request costs the proxy process, counted by callgrind",
            "(the proxy under valgrind serves n and then 2n requests in turn on one keep-alive",
            "connection from a client outside valgrind, upstream nginx not counted; the",
            "difference over n cancels start-up and shutdown). Unlike wall time, this does not",
            "move with the machine's load. The uvloop byte relay forwards bytes both ways with",
            "no HTTP at all: the floor of any Python proxy on this event loop; the minimal",
            "httptools proxy parses both ways and does nothing else, the floor of one that speaks",
            "HTTP (both in bench/sidecar/floor_proxies.py). The sidecar runs",
            "with its defaults (the cascade on: learning, hop tokens), and once without it.",
            "",
            f"Rerun: `.venv/bin/python -m bench.sidecar.instructions --src OTHER/src --label NAME "
            f"--write` (n={args.n}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
            "",
            *table,
            "",
        ]
        write_section(DOC, "\n".join(section), SECTION)
        print(f"wrote the '{SECTION}' section of {DOC}")
    return 0


def grpc_main(args: argparse.Namespace) -> int:
    """Instructions per gRPC Call: each sidecar tree, and the empty grpc.aio server."""
    n = min(args.n, 1000)  # a Call costs the server ~3x a proxied request
    workdir = Path(tempfile.mkdtemp(prefix="ccb-bench-instr-"))
    upstream = procs.start_upstream(workdir)
    rows: list[tuple[str, float]] = []
    try:
        trees = [str(HERE / "src"), *args.src]
        labels = ["sidecar Call (this checkout)", *[f"sidecar Call ({x})" for x in args.label]]
        labels += [f"sidecar Call ({t})" for t in args.src[len(args.label) :]]
        for label, tree in zip(labels, trees, strict=True):
            port = procs.free_port()
            command = sidecar_argv(
                workdir, tree, upstream.port, port, f"g{len(rows)}", listener="grpc"
            )
            rows.append((label, per_request(command, port, n, _drive_grpc, {})))
            print(f"{label}: {rows[-1][1]:,.0f}", flush=True)
        port = procs.free_port()
        label = "grpc.aio server + a bare upstream GET (grpc_floor.py PORT UPSTREAM)"
        command = [*grpc_floor_argv(port), str(upstream.port)]
        rows.append((label, per_request(command, port, n, _drive_grpc, {})))
        print(f"{label}: {rows[-1][1]:,.0f}", flush=True)
        port = procs.free_port()
        label = "empty grpc.aio server (grpc_floor.py)"
        rows.append((label, per_request(grpc_floor_argv(port), port, n, _drive_grpc, {})))
        print(f"{label}: {rows[-1][1]:,.0f}", flush=True)
    finally:
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    table = render_grpc(rows)
    print(f"\ninstructions per gRPC Call (callgrind, n={n}):\n")
    print("\n".join(table))
    if args.write:
        from bench.core.report import write_section

        section = [
            GRPC_SECTION,
            "",
            "Instructions one gRPC `Call` costs the server process, counted by callgrind as for",
            "requests above (n and then 2n calls in turn on one channel from a grpcio client",
            "outside valgrind; upstream nginx not counted). The empty grpc.aio server",
            "(bench/sidecar/grpc_floor.py: same generated code, options and event loop, `Call`",
            "answers at once) is grpc's own cost: what the sidecar adds to it is its own work.",
            "The same server making a bare GET to the upstream first (no parsing, no pipeline)",
            "shows what the hop itself costs a grpc.aio handler.",
            "",
            f"Rerun: `.venv/bin/python -m bench.sidecar.instructions --grpc --src OTHER/src "
            f"--label NAME --write` (n={n}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
            "",
            *table,
            "",
        ]
        write_section(DOC, "\n".join(section), GRPC_SECTION)
        print(f"wrote the '{GRPC_SECTION}' section of {DOC}")
    return 0


def render_grpc(rows: list[tuple[str, float]]) -> list[str]:
    """A markdown table: instructions per Call, and what each adds to the empty server."""
    floor = rows[-1][1]
    lines = ["| server | instructions per Call | above the empty server |", "|---|--:|--:|"]
    for label, value in rows:
        above = f"{value - floor:+,.0f}" if label != rows[-1][0] else "-"
        lines.append(f"| {label} | {value:,.0f} | {above} |")
    return lines


def render(rows: list[tuple[str, float]]) -> list[str]:
    """A markdown table: instructions per request, and the ratio to nginx when measured."""
    nginx = dict(rows).get("nginx proxy")
    lines = ["| proxy | instructions per request | x nginx |", "|---|--:|--:|"]
    for label, value in rows:
        ratio = f"{value / nginx:.2f}x" if nginx else "-"
        lines.append(f"| {label} | {value:,.0f} | {ratio} |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())

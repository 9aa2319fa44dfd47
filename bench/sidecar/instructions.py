"""Instructions per proxied request, counted by callgrind: a measure a busy machine cannot skew.

    .venv/bin/python -m bench.sidecar.instructions                  # this checkout, and nginx
    .venv/bin/python -m bench.sidecar.instructions --src OTHER/src --label main --write
                                                    # and another tree, same run, into the docs

A proxy (the sidecar's outbound listener, or an nginx reverse proxy: the peer) runs under
`valgrind --tool=callgrind` in front of an nginx upstream that is not counted. A client outside
valgrind sends N requests one after another on one keep-alive connection, and the proxy is
stopped (SIGTERM; callgrind counts up to the exit). The same is done with 2N requests; the
difference divided by N is the cost of one request, start-up and shutdown cancelled out. The
floor proxies (bench/sidecar/floor_proxies.py) give the floor of any Python proxy on the same
event loop: a uvloop byte relay (no HTTP at all) and a minimal httptools proxy (parse both ways,
no logic); `python -m bench sidecar` runs the same two beside nginx in wall time.
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
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import procs

HERE = Path(__file__).resolve().parents[2]
DOC = HERE / "docs" / "benchmarks.md"
SECTION = "## Sidecar: instructions per request"
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
_REQUEST = b"GET /payment/ HTTP/1.1\r\nhost: bench\r\nuser-agent: bench\r\naccept: */*\r\n\r\n"


def _drive(port: int, n: int, request: bytes) -> None:
    """Send `n` requests in turn on one keep-alive connection; each answer read whole."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            s.sendall(request)
            got = b""
            while not got.endswith(procs.BODY.encode()):
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError(f"connection closed after {got!r}")
                got += chunk
            if not got.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"unexpected answer {got[:200]!r}")


def _wait_ready(port: int, process: subprocess.Popen[bytes], request: bytes) -> None:
    deadline = time.monotonic() + 300  # start-up under valgrind is slow
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the proxy under valgrind exited during start-up")
        try:
            _drive(port, 1, request)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the proxy under valgrind did not answer within 300 s")


def count(argv: list[str], port: int, n: int, request: bytes, env: dict[str, str]) -> int:
    """Instructions callgrind counts for the proxy `argv` serving 1 + n requests."""
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
            _wait_ready(port, process, request)
            _drive(port, n, request)
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


def per_request(argv: list[str], port: int, n: int, request: bytes, env: dict[str, str]) -> float:
    """Instructions of one proxied request (start-up cancelled by serving n and 2n)."""
    return (count(argv, port, 2 * n, request, env) - count(argv, port, n, request, env)) / n


def sidecar_argv(
    workdir: Path, src: str, upstream: int, port: int, label: str, cascade: bool = True
) -> list[str]:
    """`ccb sidecar` from the source tree `src`: an outbound listener only (no gRPC, no admin)."""
    config: dict[str, object] = {
        "service": "checkout",
        "listen": {
            "outbound": f"127.0.0.1:{port}",
            "inbound": None,
            "grpc": None,
            "admin": None,
        },
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


def main(argv: list[str] | None = None) -> int:
    """Print instructions per proxied request for each proxy, and record them if asked."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", action="append", default=[], help="another source tree (src/)")
    parser.add_argument("--label", action="append", default=[], help="a name for each --src")
    parser.add_argument("--write", action="store_true", help="record the table in the docs")
    parser.add_argument("-n", type=int, default=2000, help="requests (the run does n and 2n)")
    parser.add_argument("--no-peers", action="store_true", help="only the sidecar tree(s)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench instructions: valgrind is not installed (apt-get install valgrind)")
        return 1
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

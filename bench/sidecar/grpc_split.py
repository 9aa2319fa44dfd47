"""Where a gRPC `Call`'s time goes beyond grpc's own: three grpc.aio servers, one step apart.

    .venv/bin/python -m bench.sidecar.grpc_split [--src TREE] [--rounds 5] [--seconds 3]
    .venv/bin/python -m bench.sidecar.grpc_split --serve KIND PORT UPSTREAM   # (one server)

Each server is grpc.aio on uvloop with the same generated code, in its own process, called
by the same grpcio aio client at 1 connection (as `python -m bench sidecar` does), rounds
interleaved. The servers add one layer each:

- `bare GET`: `Call` makes a bare GET on a raw asyncio connection (grpc_floor.py);
- `pipeline`: `Call` awaits the sidecar's `runtime.call_raw` (hooks, breaker, pool, the
  HTTP/1.1 exchange, stats: the data plane the HTTP listeners share) and answers a
  `CallResponse` message;
- `full Call`: the sidecar's servicer (`SidecarService`: the request's bytes decoded, the
  reply's encoded, errors mapped).

`full Call` less `pipeline` is the gRPC layer's cost; `pipeline` less `bare GET` is the
shared data plane's. The last column makes the same two upstream calls in a plain loop outside
grpc, where caches stay warm: the data plane's step there is what its instructions cost; the
rest of its step inside grpc.aio is the cold caches the grpc process leaves it. With
`--src TREE` the sidecar is imported from an unpacked compiled wheel
(`python -m bench.sidecar.mypyc_trial --keep DIR`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import procs
from bench.sidecar.loadgen import grpc_calls

KINDS = ("bare GET", "pipeline", "full Call")


def _runtime(upstream: int) -> Any:
    from cascadebreaker.sidecar.schema import parse_config
    from cascadebreaker.sidecar.server import build_runtime

    config = parse_config(
        {
            "service": "checkout",
            "listen": {"outbound": None, "inbound": None, "grpc": None, "admin": None},
            "upstreams": {"payment": {"url": f"http://127.0.0.1:{upstream}", "timeout": 10.0}},
            "log_level": "warning",
        }
    )
    return build_runtime(config)


async def serve(kind: str, port: int, upstream: int) -> None:
    """Serve one of KINDS until killed."""
    import grpc

    from bench.sidecar import grpc_floor
    from cascadebreaker.sidecar.grpc.api import SidecarService, add_servicer
    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc

    runtime = _runtime(upstream)

    class Pipeline(grpc_floor.EmptySidecar):
        async def Call(self, request: Any, context: Any) -> Any:
            response = await runtime.call_raw("payment", b"GET", b"/", [], b"", 10.0)
            return pb.CallResponse(status=response.status, body=response.body)

    server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
    if kind == "full Call":
        add_servicer(SidecarService(runtime), server)
    else:
        servicer = grpc_floor.FetchingSidecar(upstream) if kind == "bare GET" else Pipeline()
        sidecar_pb2_grpc.add_SidecarServicer_to_server(  # type: ignore[no-untyped-call]
            servicer, server
        )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def warm_loop(upstream: int, n: int) -> tuple[float, float]:
    """CPU µs per call of the bare GET and of `runtime.call_raw`, in a plain loop (no grpc)."""
    from bench.sidecar import grpc_floor

    runtime = _runtime(upstream)
    bare: Any = grpc_floor.FetchingSidecar(upstream)

    async def bare_get() -> None:
        await bare.Call(None, None)

    async def pipeline() -> None:
        await runtime.call_raw("payment", b"GET", b"/", [], b"", 10.0)

    costs = []
    for call in (bare_get, pipeline):
        for _ in range(n // 10):  # warm: connections open, caches filled
            await call()
        started = time.process_time()
        for _ in range(n):
            await call()
        costs.append((time.process_time() - started) / n * 1e6)
    return costs[0], costs[1]


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: list[str] | None = None) -> int:
    """Measure the three servers (or, with --serve, be one of them)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", help="import the sidecar from this tree (a compiled wheel's)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--serve", nargs=3, metavar=("KIND", "PORT", "UPSTREAM"))
    parser.add_argument("--warm", type=int, metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # The servers and the warm loop run in child processes: PYTHONPATH puts --src first there.
    if args.serve:
        kind, port, upstream = args.serve
        _run(serve(kind, int(port), int(upstream)))
        return 0
    if args.warm:
        print(*_run(warm_loop(args.warm, 3000)))
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="ccb-grpc-split-"))
    upstream = procs.start_upstream(workdir)
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        env = {**os.environ, **({"PYTHONPATH": args.src} if args.src else {})}
        for kind in KINDS:
            port = procs.free_port()
            argv = [sys.executable, str(Path(__file__).resolve()), "--serve", kind, str(port)]
            process, log = procs._spawn(
                kind.replace(" ", "-"), [*argv, str(upstream.port)], workdir, env
            )
            procs.wait_tcp(port, process, kind, log)
            servers[kind] = (process, port)
        p50: dict[str, list[float]] = {k: [] for k in KINDS}
        cpu: dict[str, list[float]] = {k: [] for k in KINDS}
        for _ in range(args.rounds):
            for kind, (process, port) in servers.items():
                before = procs.CpuReading.of(process.pid)
                result = _run(grpc_calls(f"127.0.0.1:{port}", "payment", 1, args.seconds))
                user, system = procs.CpuReading.of(process.pid).split(before)
                calls = result.rps * (args.seconds + 0.5)  # the warm-up's calls ran too
                p50[kind].append(result.percentile(50))
                cpu[kind].append((user + system) / calls * 1e6)
        warm = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--warm", str(upstream.port)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        warm_bare, warm_pipeline = (float(x) for x in warm.stdout.split())
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(timeout=30)
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(render(p50, cpu, warm_bare, warm_pipeline, args.rounds))
    return 0


def render(
    p50: dict[str, list[float]],
    cpu: dict[str, list[float]],
    warm_bare: float,
    warm_pipeline: float,
    rounds: int,
) -> str:
    """The table: each server's p50 and CPU per call (medians over rounds), the step from the
    server above it, and the same step in a warm loop outside grpc."""
    lines = [
        f"gRPC Call, 1 connection, medians of {rounds} rounds:",
        "",
        "| server | p50 µs | CPU µs per call | CPU step | the same upstream call in a warm loop,"
        " no grpc: CPU µs |",
        "|---|--:|--:|--:|--:|",
    ]
    warm = {"bare GET": f"{warm_bare:,.1f}", "pipeline": f"{warm_pipeline:,.1f}"}
    previous: float | None = None
    for kind in KINDS:
        median_cpu = statistics.median(cpu[kind])
        step = "-" if previous is None else f"{median_cpu - previous:+,.1f}"
        lines.append(
            f"| {kind} | {statistics.median(p50[kind]):,.0f} | {median_cpu:,.1f} | {step} "
            f"| {warm.get(kind, '-')} |"
        )
        previous = median_cpu
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

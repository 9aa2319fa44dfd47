"""`ccb dashboard`: serve the live picture of the cascade to a browser."""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
from types import FrameType
from typing import Any

__all__ = ["DEFAULT_PORT", "register", "run_dashboard"]

DEFAULT_PORT = 15080


def register(subparsers: Any) -> None:
    """Add `dashboard` to the `ccb` parser."""
    parser = subparsers.add_parser(
        "dashboard", help="the live dependency graph, breakers and cause chains in a browser"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--sidecar",
        action="append",
        default=[],
        metavar="ADMIN_URL",
        help="a sidecar's admin URL (repeat for each sidecar)",
    )
    parser.add_argument("--demo", action="store_true", help="follow the running `ccb demo`")
    parser.add_argument(
        "--redis", metavar="URL", help="hear every replica's updates on Redis pub/sub"
    )
    parser.add_argument("--namespace", default="ccb", help="the cascade's Redis namespace")
    parser.add_argument(
        "--interval", type=float, default=5.0, help="seconds between /status reads of a sidecar"
    )
    parser.add_argument(
        "--min-gap",
        type=float,
        default=2.0,
        help="never read a sidecar's /status more often than this (seconds)",
    )
    parser.add_argument(
        "--poll-only",
        action="store_true",
        help="no Watch streams (e.g. gRPC not reachable): changes show within --interval",
    )
    parser.set_defaults(handler=run_dashboard)


def run_dashboard(args: argparse.Namespace) -> int:
    """Serve until interrupted; exit 2 on bad arguments or a port that cannot be bound."""
    from cascadebreaker.dashboard.sources import SourceError, from_arguments

    if not 0 <= args.port <= 65535:
        return _fail(f"--port {args.port}: expected 0..65535")
    if not 0 < args.min_gap <= args.interval:
        return _fail("--min-gap and --interval: expected 0 < min-gap <= interval")
    try:
        sources = from_arguments(args.sidecar, args.demo, args.redis, args.namespace)
    except SourceError as exc:
        return _fail(str(exc))
    try:
        listener = socket.create_server((args.host, args.port))
    except OSError as exc:
        return _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")

    import uvicorn

    from cascadebreaker.dashboard.aggregator import Aggregator, Pacing
    from cascadebreaker.dashboard.server import create_app

    pacing = Pacing(args.interval, args.min_gap)
    app = create_app(Aggregator(sources, pacing, watch=not args.poll_only))
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"ccb dashboard: http://{shown}:{port}/", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    # uvicorn stops gracefully on SIGTERM, then raises the signal again: let that end us with 0.
    signal.signal(signal.SIGTERM, _interrupt)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[listener])
    return 0


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _fail(message: str) -> int:
    print(f"ccb dashboard: {message}", file=sys.stderr)
    return 2

"""`ccb sidecar --config FILE`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from cascadebreaker.sidecar.config import ConfigError, SidecarConfig, load_config, parse_config
from cascadebreaker.sidecar.mesh.config import parse_cascade_config


def register(subparsers: Any) -> None:
    """Add the `sidecar` subcommand."""
    add_arguments(subparsers.add_parser("sidecar", help="run the sidecar proxy"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sidecar's arguments (`ccb sidecar` and `python -m cascadebreaker.sidecar` alike)."""
    parser.add_argument("--config", required=True, metavar="FILE", help="YAML configuration")
    parser.add_argument(
        "--listen",
        action="append",
        default=[],
        metavar="NAME=ADDR",
        help="override listen.NAME (an injector pins the ports its manifests rely on)",
    )
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Load the config (exit 2 when invalid) and serve until SIGTERM (exit 0)."""
    # Before gRPC loads: its core writes a line to stderr for every failed TLS handshake, so
    # any client could fill the log. Its errors still show; GRPC_VERBOSITY=INFO shows the rest.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from cascadebreaker.sidecar.grpc.tls import TlsError, read_material

    try:
        config = override_listeners(load_config(args.config), args.listen)
        parse_cascade_config(config.cascade, config.upstreams)  # its own model
        if config.grpc_tls is not None:
            tls = config.grpc_tls
            read_material(tls.cert, tls.key, tls.ca)  # unreadable or mismatched files: exit 2
    except (ConfigError, TlsError) as exc:
        print(f"ccb sidecar: invalid config {args.config}: {exc}", file=sys.stderr)
        return 2
    return serve(config)


def override_listeners(config: SidecarConfig, overrides: list[str]) -> SidecarConfig:
    """`config` with `NAME=HOST:PORT` overrides of its listeners, validated like the file."""
    if not overrides:
        return config
    listen = config.listen.model_dump()
    for item in overrides:
        name, sep, address = item.partition("=")
        if not sep or name not in listen:
            raise ConfigError(
                f"--listen {item}: must be NAME=HOST:PORT, NAME one of {list(listen)}"
            )
        listen[name] = None if address in ("", "null") else address
    return parse_config({**config.model_dump(), "listen": listen})


def serve(config: SidecarConfig) -> int:
    """Run a sidecar in this process (uvloop when installed)."""
    from cascadebreaker.sidecar.server import SidecarServer

    logging.basicConfig(
        level=config.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    async def main() -> None:
        await SidecarServer(config).run()

    try:
        _run(main())
    except OSError as exc:
        print(f"ccb sidecar: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0


def _run(coro: Any) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)

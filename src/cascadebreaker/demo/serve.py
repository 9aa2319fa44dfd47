"""Process entry of one demo service (`python -m cascadebreaker.demo.serve`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from cascadebreaker.demo.services import create_app
from cascadebreaker.demo.services.common import ServiceContext
from cascadebreaker.demo.topology import HOST, Topology


def main(argv: Sequence[str] | None = None) -> int:
    """Serve one service of the topology until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="cascadebreaker.demo.serve")
    parser.add_argument("--topology", type=Path, required=True)
    parser.add_argument("--service", required=True)
    # A service without a sidecar in a pod is reached on the pod's address, not loopback.
    parser.add_argument("--host", default=HOST, help=f"address to bind (default {HOST})")
    args = parser.parse_args(argv)
    topology = Topology.load(args.topology)
    spec = topology.service(args.service)
    app = create_app(ServiceContext(spec.name, topology))
    config = uvicorn.Config(
        app,
        host=args.host,
        port=spec.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Process entry of the web demo's page (`python -m cascadebreaker.demo.web.serve`).

Django behind a threaded WSGI server: a page request that waits on the settlement API holds
one thread, never the whole process (sync views under ASGI would share one thread).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from cascadebreaker.demo.topology import HOST, Topology
from cascadebreaker.demo.web.source import SourceConfig

SERVICE = "web"
UPSTREAM = "settlement-api"


def source_config(topology: Topology) -> SourceConfig:
    """How the page reaches the settlement API in this topology (a sidecar's address if any)."""
    t = topology.timings
    return SourceConfig(
        settlement_url=topology.upstream_base_url(SERVICE, UPSTREAM),
        call_timeout=t.call_timeout,
        failure_threshold=t.failure_threshold,
        recovery_timeout=t.recovery_timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the report page until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="cascadebreaker.demo.web.serve")
    parser.add_argument("--topology", type=Path, required=True)
    args = parser.parse_args(argv)
    topology = Topology.load(args.topology)

    from django.core.servers.basehttp import run
    from django.core.wsgi import get_wsgi_application

    from cascadebreaker.demo.web.site.settings import configure

    configure(source_config(topology))
    run(HOST, topology.service(SERVICE).port, get_wsgi_application(), threading=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

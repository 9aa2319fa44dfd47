"""`ccb demo web`: the settlement report page and its settlement API, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import errno
import socket
import sys
import time
from typing import Any

from cascadebreaker.demo.topology import HOST

DEFAULT_PORT = 8000


def add_arguments(parser: Any) -> None:
    """The options of `ccb demo web`."""
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the page's port (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--recovery-timeout",
        type=float,
        default=10.0,
        help="seconds the settlement API's breaker stays open before a probe (default 10)",
    )
    parser.add_argument(
        "--failure-threshold",
        type=int,
        default=3,
        help="failures in a row that open the breaker (default 3)",
    )
    parser.add_argument(
        "--call-timeout",
        type=float,
        default=1.0,
        help="seconds the page waits for the settlement API (default 1)",
    )
    parser.add_argument(
        "--sidecars",
        action="store_true",
        help="serve the page through its own sidecar, which calls the settlement API (the "
        "cascade learns that the page survives it: it is never refused)",
    )
    parser.set_defaults(handler=run_demo_web)


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        # As the server will: a port held only by closed connections (TIME_WAIT) is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def run_demo_web(args: argparse.Namespace) -> int:
    """Start the settlement API and the page, print the URL, and stop both cleanly."""
    if not 0 < args.port < 65536:
        print(f"ccb demo web: --port must be 1..65535, got {args.port}", file=sys.stderr)
        return 2
    if args.recovery_timeout <= 0 or args.call_timeout <= 0 or args.failure_threshold < 1:
        print(
            "ccb demo web: --recovery-timeout and --call-timeout must be > 0, "
            "--failure-threshold >= 1",
            file=sys.stderr,
        )
        return 2
    try:
        import django  # noqa: F401
        import inertia  # noqa: F401
    except ImportError as exc:
        print(
            f"ccb demo web: needs the '{exc.name}' package; pip install 'cascadebreaker[all]'",
            file=sys.stderr,
        )
        return 2
    from cascadebreaker.demo.control import (
        DemoAlreadyRunning,
        claim_state,
        remove_state,
        write_state,
    )
    from cascadebreaker.demo.launcher import LaunchError, sigterm_as_interrupt
    from cascadebreaker.demo.topology import Timings
    from cascadebreaker.demo.web.site.assets import AssetsMissing, load
    from cascadebreaker.demo.web.system import WebDemoSystem

    try:
        claim_state()
        load()
    except (DemoAlreadyRunning, AssetsMissing) as exc:
        print(f"ccb demo web: {exc}", file=sys.stderr)
        return 1
    if _port_taken(args.port):
        print(
            f"ccb demo web: port {args.port} is in use; pick another with --port", file=sys.stderr
        )
        return 1
    timings = Timings(
        call_timeout=args.call_timeout,
        failure_threshold=args.failure_threshold,
        recovery_timeout=args.recovery_timeout,
    )
    system = WebDemoSystem.create_web(timings, args.port, sidecars=args.sidecars)
    sigterm_as_interrupt()
    try:
        system.start()
        path = write_state(system.topology, system.pids(), system.workdir)
        api = system.topology.service("settlement-api").app_url
        print(f"settlement report: {system.page_url}")
        print(f"settlement API:    {api}")
        print("faults:            ccb fault inject settlement-api --mode down|slow|errors")
        print("                   ccb fault clear")
        print(f"state file: {path}   logs: {system.workdir}")
        print("running; Ctrl-C to stop", flush=True)
        while True:
            time.sleep(0.5)
            for process in system.processes.values():
                if not process.running:
                    print(f"ccb demo web: {process.name} exited:\n{process.log_tail()}")
                    return 1
    except LaunchError as exc:
        print(f"ccb demo web: failed to start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping…", flush=True)
    finally:
        remove_state()
        system.stop()
    return 0

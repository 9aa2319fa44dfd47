"""`ccb demo --dashboard`: the dashboard beside the shop, as one more process of the demo."""

from __future__ import annotations

import sys

from cascadebreaker.demo.launcher import DemoSystem, ManagedProcess
from cascadebreaker.demo.topology import HOST, free_port


def start_dashboard(system: DemoSystem, port: int = 0) -> str:
    """Start `ccb dashboard --demo` (it reads the demo's state file); returns its URL.

    Call after the state file is written. The process stops with the system.
    """
    port = port or free_port()
    url = f"http://{HOST}:{port}/"
    argv = [sys.executable, "-m", "cascadebreaker.cli", "dashboard", "--demo", "--port", str(port)]
    log = system.workdir / "dashboard.log"
    system.attach(ManagedProcess("dashboard", argv, f"{url}healthz", log))
    return url

"""The processes of the dashboard benchmark: a leaf, one sidecar, and `ccb dashboard`."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.cascade.propagation import LEAF  # nginx: /fail answers 500, the rest 200
from bench.sidecar.procs import (
    BenchSetupError,
    Proc,
    ccb_command,
    free_port,
    start_nginx,
    start_sidecar,
)

RECOVERY = 0.25  # the breaker's open period: one trip per second or so
SECRET = "bench-dashboard-secret"


@dataclass
class Shop:
    """nginx `leaf` and the sidecar `shop` whose one upstream is the leaf."""

    leaf: Proc
    sidecar: Proc

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.sidecar.extra_ports['admin']}"

    def stop(self) -> None:
        self.sidecar.stop()
        self.leaf.stop()


def start_shop(workdir: Path) -> Shop:
    """Start the leaf and the sidecar (static edge `shop GET /buy -> leaf GET /x`)."""
    port = free_port()
    leaf = start_nginx("leaf", workdir, LEAF.format(port=port), port)
    config = {
        "service": "shop",
        "listen": {
            "outbound": f"127.0.0.1:{free_port()}",
            "inbound": None,
            "grpc": f"127.0.0.1:{free_port()}",
            "admin": f"127.0.0.1:{free_port()}",
        },
        "upstreams": {
            "leaf": {
                "url": f"http://127.0.0.1:{port}",
                "breaker": {"failure_threshold": 1, "recovery_timeout": RECOVERY},
            }
        },
        "cascade": {
            "secret": SECRET,
            "edges": [{"caller": "shop GET /buy", "callee": "leaf GET /x"}],
        },
        "log_level": "warning",
    }
    return Shop(leaf, start_sidecar(workdir, "shop", config, "/leaf/"))


def start_dashboard(workdir: Path, name: str, admin_url: str, *options: str) -> Proc:
    """`ccb dashboard --sidecar admin_url ...` on a free port; ready once /healthz answers."""
    port = free_port()
    log = workdir / f"{name}.log"
    argv = [*ccb_command(), "dashboard", "--port", str(port), "--sidecar", admin_url, *options]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    proc = Proc(name, process, port, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.stop()
    raise BenchSetupError(f"{name} did not start:\n{log.read_text(errors='replace')[-2000:]}")

"""The system under chaos: Redis, two apps, three sidecars in a chain, on loopback free ports.

    load -> checkout's sidecar (outbound) -> payment's sidecar (inbound) -> payment app
                                             payment's sidecar (outbound) -> ledger's sidecar
                                                                 (inbound) -> ledger app

Breakers live in Redis (shared store) and the cascade uses Redis pub/sub and peer `Watch`
streams (learned from signed `ccb-sidecar-grpc` claims), all under one secret. Every process
is a child with its log in the work directory; the sidecars can be killed and started again
on the same ports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.sidecar.procs import free_port, wait_http
from cascadebreaker.testing import RedisServer

ROOT = Path(__file__).resolve().parents[2]
SECRET = "chaos-run-secret"
RECOVERY = 3.0  # breaker recovery_timeout: how soon a restarted peer is probed
HEADER_TIMEOUT = 10.0  # slow clients are cut (408) after this


@dataclass
class Child:
    """A child process we can kill and start again with the same command."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        """Start (or restart) the process, appending to its log."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                cwd=self.log.parent,
            )
        self.starts += 1

    @property
    def pid(self) -> int | None:
        """The live process id, or None."""
        return self.process.pid if self.process and self.process.poll() is None else None

    def kill(self) -> None:
        """SIGKILL (a crash, no drain)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> int | None:
        """SIGTERM and wait (a drain); the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


@dataclass
class Sidecar(Child):
    """A `ccb sidecar` child with its listener ports."""

    ports: dict[str, int] = field(default_factory=dict)

    def wait_ready(self) -> None:
        """Until /readyz answers 200."""
        assert self.process is not None
        wait_http(self.ports["admin"], "/readyz", self.process, self.name, self.log)

    def restart(self) -> None:
        """Start again on the same ports and wait until ready (after a kill)."""
        self.start()
        self.wait_ready()


@dataclass
class Topology:
    """Every process of the run."""

    workdir: Path
    redis: RedisServer
    apps: dict[str, Child]
    sidecars: dict[str, Sidecar]

    @property
    def load_url(self) -> str:
        """Where the load enters: checkout's sidecar outbound, route to payment."""
        return f"http://127.0.0.1:{self.sidecars['checkout'].ports['outbound']}/payment"

    def hostile_targets(self) -> list[tuple[int, str]]:
        """(port, path prefix) that slow and fuzzing clients aim at."""
        return [
            (self.sidecars["checkout"].ports["outbound"], "/payment"),
            (self.sidecars["payment"].ports["inbound"], ""),
        ]

    def freeze_redis(self) -> None:
        """SIGSTOP: Redis holds its connections but answers nothing."""
        self.redis.process.send_signal(signal.SIGSTOP)

    def thaw_redis(self) -> None:
        """SIGCONT."""
        self.redis.process.send_signal(signal.SIGCONT)

    def kill_redis(self) -> None:
        """SIGKILL Redis (its data is gone; breakers fall back to local state)."""
        self.redis.stop()

    def restart_redis(self) -> None:
        """A fresh, empty Redis on the same port."""
        self.redis.start()

    def stop(self) -> dict[str, int | None]:
        """Drain every sidecar (SIGTERM), stop the apps and Redis; sidecars' exit codes."""
        codes = {name: sidecar.stop() for name, sidecar in self.sidecars.items()}
        for app in self.apps.values():
            app.stop()
        self.thaw_redis()
        self.redis.stop()
        return codes


def _sidecar_config(service: str, ports: dict[str, int], **extra: Any) -> dict[str, Any]:
    listen: dict[str, str | None] = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    for name in ("outbound", "inbound"):
        listen.setdefault(name, None)
    return {
        "service": service,
        "listen": listen,
        "log_level": "info",
        "shutdown_grace": 5,
        "limits": {"header_timeout": HEADER_TIMEOUT, "body_timeout": HEADER_TIMEOUT},
        **extra,
    }


def _upstream(port: int, scope: str = "upstream") -> dict[str, Any]:
    return {
        "url": f"http://127.0.0.1:{port}",
        "timeout": 10,
        "breaker": {"failure_threshold": 5, "recovery_timeout": RECOVERY, "scope": scope},
    }


def build(workdir: Path, redis: RedisServer) -> Topology:
    """Start everything around `redis` and wait until each piece answers."""
    ports = {
        "checkout": {n: free_port() for n in ("outbound", "grpc", "admin")},
        "payment": {n: free_port() for n in ("outbound", "inbound", "grpc", "admin")},
        "ledger": {n: free_port() for n in ("inbound", "grpc", "admin")},
    }
    app_ports = {"payment": free_port(), "ledger": free_port()}
    python = sys.executable
    env = {"PYTHONPATH": str(ROOT), "CCB_SECRET": SECRET}
    apps = {
        "ledger": Child(
            "ledger-app",
            [python, "-m", "bench.chaos.apps", "ledger", str(app_ports["ledger"])],
            workdir / "ledger-app.log",
            env,
        ),
        "payment": Child(
            "payment-app",
            [
                python,
                "-m",
                "bench.chaos.apps",
                "payment",
                str(app_ports["payment"]),
                f"http://127.0.0.1:{ports['payment']['outbound']}/ledger",
            ],
            workdir / "payment-app.log",
            env,
        ),
    }
    configs = {
        "ledger": _sidecar_config(
            "ledger", ports["ledger"], app=f"http://127.0.0.1:{app_ports['ledger']}"
        ),
        "payment": _sidecar_config(
            "payment",
            ports["payment"],
            app=f"http://127.0.0.1:{app_ports['payment']}",
            upstreams={"ledger": _upstream(ports["ledger"]["inbound"])},
        ),
        "checkout": _sidecar_config(
            "checkout",
            ports["checkout"],
            # Per endpoint: `chain` failing while ledger is down must not open `charge`.
            upstreams={"payment": _upstream(ports["payment"]["inbound"], scope="endpoint")},
        ),
    }
    sidecars = {}
    for service, config in configs.items():
        config["store"] = redis.url
        path = workdir / f"{service}-sidecar.yaml"
        path.write_text(yaml.safe_dump(config))
        sidecars[service] = Sidecar(
            f"{service}-sidecar",
            [python, "-m", "cascadebreaker.sidecar", "--config", str(path)],
            workdir / f"{service}-sidecar.log",
            env,
            ports=ports[service],
        )
    topology = Topology(workdir, redis, apps, sidecars)
    try:
        for app in apps.values():
            app.start()
        for sidecar in sidecars.values():
            sidecar.start()
        for sidecar in sidecars.values():
            sidecar.wait_ready()
        for name, app in apps.items():
            assert app.process is not None
            probe = "/v1/entries/1" if name == "ledger" else "/v1/charges/1"
            wait_http(app_ports[name], probe, app.process, app.name, app.log)
    except BaseException:
        topology.stop()
        raise
    return topology

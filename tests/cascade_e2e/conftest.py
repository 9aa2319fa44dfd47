"""Real sidecar processes on loopback in front of tiny real apps, wired into topologies."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml

from cascadebreaker.testing.ports import free_port as free_port

from .apps import App, Call

LISTENERS = ("outbound", "inbound", "grpc", "admin")


def wait_for(
    predicate: Callable[[], Any], what: str, deadline: float = 15.0, pause: float = 0.05
) -> Any:
    """Poll until `predicate()` is truthy; fail with `what` when the deadline passes."""
    end = time.monotonic() + deadline
    last: Any = None
    while time.monotonic() < end:
        last = predicate()
        if last:
            return last
        time.sleep(pause)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def traceparent() -> str:
    """A fresh W3C traceparent (new trace)."""
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


@dataclass
class Sidecar:
    """One `ccb sidecar` child process with its config and listener ports."""

    service: str
    config: dict[str, Any]
    workdir: Path
    env: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def url(self, listener: str) -> str:
        return f"http://127.0.0.1:{self.ports[listener]}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    def spawn(self) -> None:
        """Write the config and start the process (not waiting)."""
        path = self.workdir / f"{self.service}-{self.ports['admin']}.yaml"
        path.write_text(yaml.safe_dump(self.config))
        log = open(self.workdir / f"{self.service}-{self.ports['admin']}.log", "ab")  # noqa: SIM115
        command = [sys.executable, "-m", "cascadebreaker.cli", "sidecar", "--config", str(path)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, **self.env}
        )
        log.close()

    def wait_ready(self, deadline: float = 30.0) -> None:
        """Until /readyz answers 200."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"sidecar {self.service} exited: {self.log_tail()}")
            try:
                if httpx.get(self.url("admin") + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"sidecar {self.service} not ready: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.workdir / f"{self.service}-{self.ports['admin']}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no goodbye to peers."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    # -- admin views --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(self.url("admin") + "/status", timeout=5).json()
        return result

    def cascade(self) -> dict[str, Any]:
        result: dict[str, Any] = self.status()["cascade"]
        return result

    def edges(self) -> set[tuple[str, str, bool]]:
        return {(e["caller"], e["callee"], e["required"]) for e in self.cascade()["edges"]}

    def availability(self, endpoint: str, upstream: str | None = None) -> dict[str, Any]:
        query = f"endpoint={quote(endpoint)}"
        if upstream is not None:
            query += f"&upstream={quote(upstream)}"
        response = httpx.get(self.url("admin") + "/availability?" + query, timeout=5)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def available(self, endpoint: str, upstream: str | None = None) -> bool:
        return bool(self.availability(endpoint, upstream)["available"])

    def metric(self, name: str, **labels: str) -> float:
        """The value of one Prometheus sample (0 when absent)."""
        text = httpx.get(self.url("admin") + "/metrics", timeout=5).text
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        pattern = re.escape(name + "_total") + (r"\{" + re.escape(wanted) + r"\}" if labels else "")
        for line in text.splitlines():
            if re.match(pattern + r" ", line):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def refused_early(self) -> float:
        return self.metric("ccb_cascade_refused_early", direction="outbound") + self.metric(
            "ccb_cascade_refused_early", direction="inbound"
        )


def make_sidecar(
    workdir: Path,
    service: str,
    app: App,
    upstreams: dict[str, dict[str, Any]],
    *,
    cascade: dict[str, Any] | None = None,
    store: str = "memory",
    env: dict[str, str] | None = None,
) -> Sidecar:
    """A sidecar for `app` on free ports (the app learns its outbound port)."""
    ports = {name: free_port() for name in LISTENERS}
    app.outbound_port = ports["outbound"]
    config = {
        "service": service,
        "app": app.url,
        "listen": {name: f"127.0.0.1:{port}" for name, port in ports.items()},
        "store": store,
        "upstreams": upstreams,
        "cascade": cascade or {},
        "shutdown_grace": 1,
        "log_level": "warning",
    }
    return Sidecar(service, config, workdir, env or {}, ports)


def start_all(sidecars: Iterable[Sidecar]) -> None:
    """Spawn in parallel, then wait for each; when one fails to start, stop every one spawned
    (the caller's `finally` never runs for a fixture that fails before its `try`)."""
    sidecars = list(sidecars)
    try:
        for sidecar in sidecars:
            sidecar.spawn()
        for sidecar in sidecars:
            sidecar.wait_ready()
    except BaseException:
        for sidecar in sidecars:
            sidecar.stop()
        raise


def get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """One GET with a fresh trace (unless headers say otherwise)."""
    headers = headers or {}
    merged = headers if "x-request-id" in headers else {"traceparent": traceparent(), **headers}
    return httpx.get(url, headers=merged, timeout=15)


def app(service: str, routes: dict[str, list[Call]]) -> App:
    """A started app on a free port."""
    instance = App(service, free_port(), routes)
    instance.start()
    return instance

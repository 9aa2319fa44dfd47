"""A real sidecar whose only upstream is a closed port, so a test can open its breaker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cascadebreaker.testing.ports import free_port as free_port

SERVING = "shop GET /buy"  # the endpoint the test's "app" serves while it calls pay


@dataclass
class ShopSidecar:
    """`ccb sidecar` for service `shop`, calling upstream `pay` at a port nobody listens on."""

    process: subprocess.Popen[bytes]
    admin: int
    outbound: int
    log: Path

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin}"

    def open_breaker(self) -> None:
        """Fail calls to `pay` (connection refused) until its breaker refuses them."""
        url = f"http://127.0.0.1:{self.outbound}/pay/v1/charge"
        with httpx.Client(trust_env=False, timeout=5) as client:
            for _ in range(20):
                response = client.get(url, headers={"ccb-serving-endpoint": SERVING})
                if response.status_code == 503 and "circuit" in response.text:
                    return
        raise AssertionError(f"pay's breaker never opened: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def start_shop(workdir: Path, redis_url: str | None = None) -> ShopSidecar:
    """Start the sidecar and wait until it is ready."""
    ports = {name: free_port() for name in ("outbound", "inbound", "grpc", "admin")}
    cascade: dict[str, object] = {"secret": "dashboard-tests"}
    if redis_url is not None:
        cascade["redis"] = redis_url
    config = {
        "service": "shop",
        "app": f"http://127.0.0.1:{free_port()}",
        "listen": {name: f"127.0.0.1:{port}" for name, port in ports.items()},
        "store": "memory",
        "log_level": "warning",
        "cascade": cascade,
        "upstreams": {
            "pay": {
                "url": f"http://127.0.0.1:{free_port()}",
                "timeout": 2.0,
                "breaker": {"failure_threshold": 2, "recovery_timeout": 60},
            }
        },
    }
    path = workdir / f"shop-{ports['admin']}.json"
    path.write_text(json.dumps(config))  # JSON is YAML
    log = workdir / f"shop-{ports['admin']}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cascadebreaker.cli", "sidecar", "--config", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    sidecar = ShopSidecar(process, ports["admin"], ports["outbound"], log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the sidecar exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{sidecar.admin_url}/readyz", timeout=1).status_code == 200:
                return sidecar
        except httpx.HTTPError:
            time.sleep(0.05)
    sidecar.kill()
    raise RuntimeError(f"the sidecar never got ready: {log.read_text()[-2000:]}")


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[ShopSidecar]:
    """A running `shop` sidecar (no Redis), killed after the test."""
    sidecar = start_shop(tmp_path)
    yield sidecar
    sidecar.kill()


async def until(check: Callable[[], bool], what: str, deadline: float = 20.0) -> None:
    """Wait (in the event loop) until `check()` holds; fail naming `what` at the deadline.

    A bound on waiting, not a timing claim.
    """
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)

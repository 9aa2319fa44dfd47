"""Two sidecar replicas sharing one breaker through Redis (`store: redis://...`)."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from .conftest import SidecarProcess, free_port, sidecar_command

pytestmark = pytest.mark.redis


def test_replicas_share_the_breaker(sidecar_factory: Any, redis_server: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    upstreams = {
        "ledger": {
            "url": dead,
            "timeout": 1,
            "breaker": {"failure_threshold": 2, "recovery_timeout": 30},
        }
    }
    first: SidecarProcess = sidecar_factory(upstreams, store=redis_server.url)
    second: SidecarProcess = sidecar_factory(upstreams, store=redis_server.url)
    assert first.status()["store"] == "redis"
    with httpx.Client(timeout=10) as client:
        assert [client.get(first.url("outbound") + "/ledger/x").status_code for _ in range(2)] == [
            502,
            502,
        ]
        # The trip reaches the other replica through Redis; wait for it (deadline only).
        deadline = time.monotonic() + 15
        while second.status()["breakers"]["ledger"]["state"] != "OPEN":
            assert time.monotonic() < deadline, "the second replica never saw the trip"
            time.sleep(0.05)
        rejected = client.get(second.url("outbound") + "/ledger/x")
    assert rejected.status_code == 503
    assert rejected.json()["circuitState"] == "OPEN"
    assert second.status()["breakers"]["ledger"]["calls"]["connect"] == 0


def test_probe_after_recovery_reaches_the_upstream(sidecar_factory: Any, redis_server: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    sidecar: SidecarProcess = sidecar_factory(
        {
            "ledger": {
                "url": dead,
                "timeout": 1,
                "breaker": {"failure_threshold": 1, "recovery_timeout": 0.5},
            }
        },
        store=redis_server.url,
        service="probe-check",
    )
    with httpx.Client(timeout=10) as client:
        assert client.get(sidecar.url("outbound") + "/ledger/x").status_code == 502
        assert client.get(sidecar.url("outbound") + "/ledger/x").status_code == 503
        # Once the open wait is over, a probe is admitted (through the shared store) and
        # reaches the still-dead upstream: 502 again rather than a rejection.
        deadline = time.monotonic() + 15
        while client.get(sidecar.url("outbound") + "/ledger/x").status_code != 502:
            assert time.monotonic() < deadline, "no probe was ever admitted"
            time.sleep(0.05)
    assert sidecar.status()["breakers"]["ledger"]["calls"]["connect"] == 2


def _readyz(sidecar: SidecarProcess) -> tuple[int, dict[str, Any]] | None:
    try:
        reply = httpx.get(sidecar.url("admin") + "/readyz", timeout=2)
    except httpx.HTTPError:
        return None
    return reply.status_code, reply.json()


def _until(what: str, check: Any, deadline: float = 20) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_unreachable_redis_at_start_is_not_ready_until_it_connects(
    tmp_path: Path, own_redis_server: Any
) -> None:
    """Regression (issue 9): a Redis that never connected was silent and /readyz said ready.
    Now a warning, /readyz 503 naming the store; ready once Redis is up."""
    own_redis_server.stop()
    ports = {name: free_port() for name in ("outbound", "admin")}
    config = {
        "service": "checkout",
        "listen": {
            "outbound": f"127.0.0.1:{ports['outbound']}",
            "inbound": None,
            "grpc": None,
            "admin": f"127.0.0.1:{ports['admin']}",
        },
        "store": own_redis_server.url,
        "upstreams": {"ledger": {"url": f"http://127.0.0.1:{free_port()}"}},
    }
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        sidecar_command(path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    sidecar = SidecarProcess(process, path, ports)
    lines: list[str] = []
    assert process.stderr is not None
    reader = threading.Thread(
        target=lambda: lines.extend(line.decode() for line in iter(process.stderr.readline, b"")),
        daemon=True,
    )
    reader.start()
    warning = f"store {own_redis_server.url} unreachable"
    try:
        status, body = _until("/readyz to answer", lambda: _readyz(sidecar))
        assert (status, body) == (503, {"status": "not ready", "store": "unreachable"})
        _until("the warning", lambda: any(warning in line for line in lines))
        assert "/readyz answers 503 until it connects" in "".join(lines)
        own_redis_server.start()
        _until("ready once Redis is up", lambda: (_readyz(sidecar) or (0,))[0] == 200)
        assert _readyz(sidecar) == (200, {"status": "ready", "store": "connected"})
        # The log's watcher polls the store on its own clock: wait for its line, then stop.
        connected = f"store {own_redis_server.url} connected"
        _until("the connected line", lambda: any(connected in line for line in lines))
    finally:
        sidecar.stop()
        reader.join(timeout=10)
        process.stderr.close()


def test_store_optional_is_ready_without_redis(sidecar_factory: Any, own_redis_server: Any) -> None:
    own_redis_server.stop()
    sidecar = sidecar_factory(
        {"ledger": {"url": f"http://127.0.0.1:{free_port()}"}},
        store=own_redis_server.url,
        store_optional=True,
    )
    assert _readyz(sidecar) == (200, {"status": "ready", "store": "unreachable"})

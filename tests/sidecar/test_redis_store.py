"""Two sidecar replicas sharing one breaker through Redis (`store: redis://...`)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from .conftest import SidecarProcess, free_port

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

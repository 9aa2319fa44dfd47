"""Fixtures of the demo tests: a whole demo system on loopback with short timings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from cascadebreaker.demo.launcher import DemoSystem
from cascadebreaker.demo.topology import Timings

# Short breaker timings so recovery happens within a test; timeouts stay generous.
FAST = Timings(call_timeout=3.0, failure_threshold=3, recovery_timeout=0.5)


class DemoClient:
    """A test's handle on a running demo: orders, faults, counters."""

    def __init__(self, system: DemoSystem) -> None:
        self.system = system
        self.topology = system.topology
        self.http = httpx.Client(trust_env=False, timeout=15.0)

    def order(self, headers: dict[str, str] | None = None) -> httpx.Response:
        """Place one order at the public entry."""
        return self.http.post(f"{self.topology.public_url}/orders", json={}, headers=headers)

    def stats(self, service: str) -> dict[str, Any]:
        """A service's /_stats body."""
        body: dict[str, Any] = self.http.get(
            f"{self.topology.service(service).app_url}/_stats"
        ).json()
        return body

    def count(self, service: str, counter: str) -> int:
        """One counter of one service."""
        return int(self.stats(service)["counts"].get(counter, 0))

    def fault(self, service: str, **body: Any) -> None:
        """Switch a fault on in an external upstream."""
        url = f"{self.topology.service(service).app_url}/_fault"
        self.http.post(url, json=body).raise_for_status()

    def reset(self) -> None:
        """Clear every fault; zero every counter and in-process breaker."""
        for name, spec in self.topology.services.items():
            if spec.external:
                self.clear(name)
            self.http.delete(f"{spec.app_url}/_stats").raise_for_status()

    def clear(self, service: str) -> None:
        """Clear an external upstream's fault."""
        self.http.delete(f"{self.topology.service(service).app_url}/_fault").raise_for_status()


def eventually(check: Callable[[], bool], deadline: float = 20.0, every: float = 0.1) -> bool:
    """Poll `check` until it holds or the deadline (a bound on waiting, not a timing claim)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(every)
    return check()


def _demo(mode: str) -> Iterator[DemoClient]:
    system = DemoSystem.create(mode, FAST)
    system.start()
    client = DemoClient(system)
    try:
        yield client
    finally:
        client.http.close()
        system.stop()


@pytest.fixture(scope="module")
def _plain_system() -> Iterator[DemoClient]:
    yield from _demo("plain")


@pytest.fixture
def plain_demo(_plain_system: DemoClient) -> DemoClient:
    """The demo in plain mode (in-process breakers), faults cleared and counters zeroed."""
    _plain_system.reset()
    return _plain_system


@pytest.fixture
def direct_demo() -> Iterator[DemoClient]:
    """The demo in direct mode (no breakers at all), started fresh for one test."""
    yield from _demo("direct")

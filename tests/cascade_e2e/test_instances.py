"""Two replicas of B behind A's sidecar (`urls:`), each with its own sidecar; real processes.

A GET /a → B GET /b (B1 or B2, round robin; a retry goes to the other) → Z GET /z.
B1's route to Z is broken from the start. One sick replica must not make A refuse work that
B2 can do; when B2 cannot reach Z either, A refuses at once.

Run three times: with the updates on Redis pub/sub or on NATS (B2 answers B1's report, naming
itself) and on Watch streams only (A counts B2 live from the presence on B2's stream).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from .apps import App, Call
from .conftest import Sidecar, app, free_port, get, make_sidecar, start_all, wait_for

pytestmark = pytest.mark.slow

SECRET = "e2e-instances-secret"
B_B = "GET /b"


@dataclass
class Fleet:
    apps: dict[str, App]
    sidecars: dict[str, Sidecar]
    bus: str


def _gauge(sidecar: Sidecar, name: str, endpoint: str) -> float | None:
    text = httpx.get(sidecar.url("admin") + "/metrics", timeout=5).text
    pattern = re.escape(f'{name}{{endpoint="{endpoint}"}}') + r" (\S+)"
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None


@pytest.fixture(scope="module", params=["redis", "nats", "watch"])
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, redis_server: Any
) -> Iterator[Fleet]:
    bus: str = request.param
    nats_url = request.getfixturevalue("nats_server").url if bus == "nats" else None
    workdir: Path = tmp_path_factory.mktemp(f"instances-{bus}")
    namespace = f"inst-{time.monotonic_ns()}"
    env = {"CCB_SECRET": SECRET}
    apps = {
        "A": app("A", {"/a": [Call("B", "/b")]}),
        "B1": app("B", {"/b": [Call("Z", "/z")]}),
        "B2": app("B", {"/b": [Call("Z", "/z")]}),
        "Z": app("Z", {"/z": []}),
    }

    def cascade(instance: str) -> dict[str, Any]:
        # No trickle (learned optionality's probe through an endpoint held unavailable): each
        # trickled request at the sick replica is one its sibling could have served; what is
        # tested here is that callers are not refused.
        section: dict[str, Any] = {
            "namespace": namespace,
            "instance": instance,
            "optionality": {"trickle_interval": 0},
        }
        if bus == "redis":  # the bus only: each replica keeps its own breakers in memory
            section["redis"] = f"redis://127.0.0.1:{redis_server.port}/6"
        if nats_url is not None:
            section["nats"] = nats_url
        return section

    breaker = {"failure_threshold": 2, "recovery_timeout": 30}
    dead_z = f"http://127.0.0.1:{free_port()}"  # B1's broken route: nothing listens there
    b1 = make_sidecar(
        workdir,
        "B",
        apps["B1"],
        {"Z": {"url": dead_z, "breaker": breaker}},
        cascade=cascade("b-1"),
        env=env,
    )
    b2 = make_sidecar(
        workdir,
        "B",
        apps["B2"],
        {"Z": {"url": apps["Z"].url, "breaker": breaker}},
        cascade=cascade("b-2"),
        env=env,
    )
    a = make_sidecar(
        workdir,
        "A",
        apps["A"],
        {
            "B": {
                "urls": [b1.url("inbound"), b2.url("inbound")],
                # No retries configured: a call B1's sidecar refuses (503 naming a cause, B1's
                # app never saw it) goes to B2 all the same, and is no failure of B's.
                "breaker": {"failure_threshold": 3, "recovery_timeout": 30},
            }
        },
        cascade=cascade("a-1"),
        env=env,
    )
    sidecars = {"A": a, "B1": b1, "B2": b2}
    start_all(sidecars.values())
    if bus in ("redis", "nats"):
        for sidecar in sidecars.values():
            wait_for(lambda s=sidecar: s.cascade()[bus]["connected"], f"{bus} connected")
    try:
        yield Fleet(apps, sidecars, bus)
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
        for instance in apps.values():
            instance.stop()


def test_one_sick_replica_refuses_nothing_and_a_fleet_wide_outage_refuses_at_once(
    fleet: Fleet,
) -> None:
    a, b1, b2 = (fleet.sidecars[n] for n in ("A", "B1", "B2"))

    def a_heard_b1() -> bool:
        get(a.url("inbound") + "/a")  # traffic, until B1's breaker for Z opened and A heard
        return any(row["unavailable"] for row in a.cascade()["instances"])

    wait_for(a_heard_b1, "A hears B1's report", 30, 0.1)
    assert b1.cascade()["unavailable"], "B1 knows its endpoint is unavailable"
    wait_for(lambda: a.availability(B_B, "B")["liveInstances"] == 2, "A counts both replicas")
    view = a.availability(B_B, "B")
    assert view["available"] is True
    assert view["availableFraction"] == 0.5
    [row] = [r for r in a.cascade()["instances"] if r["endpoint"] == "B GET /b"]
    assert row == {"endpoint": "B GET /b", "live": 2, "unavailable": 1, "available_fraction": 0.5}
    assert _gauge(a, "ccb_cascade_available_fraction", "B GET /b") == 0.5
    refused = a.refused_early()
    # Dependents keep calling: every call served by B2 (B1's sidecar refuses; A's sends it on).
    for _ in range(10):
        response = get(a.url("inbound") + "/a")
        assert response.status_code == 200, response.text
    assert a.refused_early() == refused
    calls = a.status()["breakers"]["B"]["calls"]
    assert calls["instance_refused"] >= 4
    assert a.status()["breakers"]["B"]["state"] == "CLOSED"
    assert a.available("GET /a")
    if fleet.bus in ("redis", "nats"):
        assert b2.cascade()["updates"]["sent"] >= 1  # B2's answer, naming itself
    if fleet.bus == "nats":
        assert a.metric("ccb_cascade_updates_received", via="nats") >= 1

    # Now B2 loses Z too: every live replica says B GET /b is unavailable.
    fleet.apps["Z"].stop()

    def a_refuses() -> bool:
        get(a.url("inbound") + "/a")  # traffic, until B2's breaker for Z opened too
        return not a.available(B_B, "B")

    wait_for(a_refuses, "A refuses B GET /b", 30, 0.1)
    view = a.availability(B_B, "B")
    assert view["availableFraction"] == 0.0
    assert [c["endpoint"] for c in view["causeChain"]] == ["Z * *", "B GET /b"]
    refused_before = a.refused_early()
    response = get(a.url("outbound") + "/B/b")
    assert response.status_code == 503
    assert response.headers["ccb-cause"] == "Z * *, B GET /b"
    assert a.refused_early() == refused_before + 1
    assert not a.available("GET /a")  # A's own endpoint: refused at the entry

"""The cascade end to end, without a secret (loopback peers): A → B → C → D and friends.

    A GET /a    → B GET /b → C GET /c → D GET /d      the chain (learned through traceparent)
    A GET /fan  → B GET /b2 (→ C GET /c-free), C GET /c    fan-out (ccb-serving-endpoint)
    A GET /opt  → C GET /c, optional                   an optional edge
    A GET /a2   → B GET /b2                            independent of D
    A GET /rid  → C GET /c-free                        learned through x-request-id
    B GET /b    → A GET /a, declared in B's config      closes a cycle A:/a → B:/b → A:/a

C's breaker for D trips when D dies; C GET /c has two callers (fan-in: B and A).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cascadebreaker.sidecar.grpc.client import SidecarClient

from .apps import App, Call
from .conftest import Sidecar, app, get, make_sidecar, start_all, wait_for


@dataclass
class Shop:
    apps: dict[str, App]
    sidecars: dict[str, Sidecar]

    def call(self, path: str, service: str = "A") -> int:
        return get(self.sidecars[service].url("inbound") + path).status_code


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    workdir: Path = tmp_path_factory.mktemp("chain")
    apps = {
        "A": app(
            "A",
            {
                "/a": [Call("B", "/b")],
                "/a2": [Call("B", "/b2")],
                "/fan": [Call("B", "/b2", "header"), Call("C", "/c", "header")],
                "/opt": [Call("C", "/c", optional=True)],
                "/rid": [Call("C", "/c-free", "request-id")],
            },
        ),
        "B": app("B", {"/b": [Call("C", "/c")], "/b2": [Call("C", "/c-free")]}),
        "C": app("C", {"/c": [Call("D", "/d")], "/c-free": []}),
        "D": app("D", {"/d": []}),
    }
    c = make_sidecar(
        workdir,
        "C",
        apps["C"],
        {"D": {"url": apps["D"].url, "breaker": {"failure_threshold": 2, "recovery_timeout": 2}}},
    )
    b = make_sidecar(workdir, "B", apps["B"], {"C": {"url": c.url("inbound")}})
    a = make_sidecar(
        workdir, "A", apps["A"], {"B": {"url": b.url("inbound")}, "C": {"url": c.url("inbound")}}
    )
    b.config["cascade"] = {
        "edges": [{"caller": "B GET /b", "callee": "A GET /a"}],
        "peers": {"A": a.grpc_address},
    }
    sidecars = {"A": a, "B": b, "C": c}
    start_all(sidecars.values())
    shop = Shop(apps, sidecars)
    # Learn the graph and the peers from ordinary traffic.
    for _ in range(3):
        for path in ("/a", "/a2", "/fan", "/opt"):
            assert shop.call(path) == 200
    wait_for(lambda: c.cascade()["subscribers"] == 2, "A and B watching C")
    wait_for(lambda: b.cascade()["subscribers"] == 1, "A watching B")
    wait_for(lambda: a.cascade()["subscribers"] == 1, "B watching A")
    try:
        yield shop
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
        for instance in apps.values():
            instance.stop()


async def _grpc_check(address: str, upstream: str, endpoint: str) -> Any:
    async with SidecarClient(address) as client:
        return await client.check(upstream, endpoint)


def _trip_c(shop: Shop) -> None:
    """Kill D and make C's breaker for D open (two failed calls straight to C)."""
    shop.apps["D"].stop()
    for _ in range(2):
        assert shop.call("/c", "C") == 424


def _recover(shop: Shop) -> None:
    """Bring D back and wait until the chain answers again."""
    shop.apps["D"].start()
    wait_for(lambda: shop.call("/c", "C") == 200, "C recovered", deadline=20, pause=0.2)
    wait_for(lambda: shop.call("/a") == 200, "A recovered", deadline=20, pause=0.2)


def test_edges_are_learned_from_traceparent_and_the_serving_header(shop: Shop) -> None:
    a, b, c = (shop.sidecars[s] for s in "ABC")
    assert ("A GET /a", "B GET /b", True) in a.edges()  # traceparent alone
    assert ("A GET /fan", "C GET /c", True) in a.edges()  # ccb-serving-endpoint
    assert ("A GET /opt", "C GET /c", False) in a.edges()  # ccb-optional
    assert shop.sidecars["A"].refused_early() == 0
    response = get(a.url("inbound") + "/rid", {"x-request-id": "order-4711"})
    assert response.status_code == 200
    assert ("A GET /rid", "C GET /c-free", True) in a.edges()  # x-request-id alone
    assert ("B GET /b", "C GET /c", True) in b.edges()
    assert ("B GET /b", "A GET /a", True) in b.edges()  # static, from config
    assert ("C GET /c", "D GET /d", True) in c.edges()
    # The cascade's own headers never reach an app behind a sidecar (D has none).
    for instance in (shop.apps[s] for s in "ABC"):
        assert not any(n.startswith("ccb-") for _, h in instance.state.seen for n in h)


def test_no_early_refusals_while_healthy(shop: Shop) -> None:
    for _ in range(20):
        for path in ("/a", "/a2", "/fan", "/opt"):
            assert shop.call(path) == 200
    for sidecar in shop.sidecars.values():
        assert sidecar.refused_early() == 0
        assert sidecar.cascade()["unavailable"] == []
    assert shop.sidecars["A"].available("GET /a")
    # The sidecar-to-sidecar response header stops at the caller's sidecar.
    response = get(shop.sidecars["A"].url("outbound") + "/B/b2")
    assert response.status_code == 200
    assert "ccb-sidecar-grpc" not in response.headers


def test_chain_refuses_early_and_recovers(shop: Shop) -> None:
    a, b = shop.sidecars["A"], shop.sidecars["B"]
    seen_before = len(shop.apps["A"].state.seen)
    _trip_c(shop)
    wait_for(lambda: not a.available("GET /a"), "A GET /a unavailable at A")
    chain = [c["endpoint"] for c in a.availability("GET /a")["causeChain"]]
    assert chain == ["D * *", "C GET /c", "B GET /b", "A GET /a"]
    # The inbound listener refuses before the app; the cause chain is in a header and the body.
    response = get(a.url("inbound") + "/a")
    assert response.status_code == 503
    assert response.headers["ccb-cause"].startswith("D * *, C GET /c")
    assert response.json()["causeChain"][0]["endpoint"] == "D * *"
    assert len(shop.apps["A"].state.seen) == seen_before
    # Fan-in: A also calls C:/c itself; fan-out: /fan needs B:/b2 (fine) and C:/c (down).
    assert not a.available("GET /c", upstream="C")
    assert not a.available("GET /fan")
    assert a.available("GET /b2", upstream="B")
    # The optional edge does not propagate; independent endpoints stay available.
    assert a.available("GET /opt")
    assert shop.call("/opt") == 200
    assert shop.call("/a2") == 200
    assert a.metric("ccb_cascade_refused_early", direction="inbound") >= 1
    assert not b.available("GET /b")
    # An orchestrator asks over gRPC before starting a saga.
    check = asyncio.run(_grpc_check(a.grpc_address, "B", "GET /b"))
    assert not check.available
    assert [c.endpoint for c in check.cause_chain] == ["* *", "GET /c", "GET /b"]
    assert check.retry_after_ms > 0
    _recover(shop)
    wait_for(lambda: a.available("GET /a") and a.available("GET /fan"), "A clear")
    assert asyncio.run(_grpc_check(a.grpc_address, "B", "GET /b")).available
    wait_for(lambda: b.cascade()["unavailable"] == [], "B clear")


def test_a_cycle_terminates(shop: Shop) -> None:
    a, b = shop.sidecars["A"], shop.sidecars["B"]
    _trip_c(shop)
    wait_for(lambda: not a.available("GET /a"), "A GET /a unavailable")
    # B hears A:/a back (its chain holds B:/b) and must not extend it: the traffic stops.
    wait_for(lambda: b.cascade()["updates"]["received"] >= 2, "B heard A's update")

    def sent() -> list[int]:
        return [s.cascade()["updates"]["sent"] for s in shop.sidecars.values()]

    def settled() -> bool:
        before = sent()
        time.sleep(0.5)
        return before == sent()

    wait_for(settled, "propagation settles")
    chains = {e["endpoint"]: e["causeChain"] for e in b.cascade()["unavailable"]}
    assert [c["endpoint"] for c in chains["B GET /b"]] == ["D * *", "C GET /c", "B GET /b"]
    _recover(shop)
    wait_for(lambda: a.available("GET /a") and b.available("GET /b"), "both clear")


def test_a_peer_killed_mid_propagation(shop: Shop) -> None:
    a, b = shop.sidecars["A"], shop.sidecars["B"]
    _trip_c(shop)
    wait_for(lambda: not a.available("GET /a"), "A GET /a unavailable")
    b.kill()  # B never sends its recovery
    shop.apps["D"].start()
    wait_for(lambda: shop.call("/c", "C") == 200, "C recovered", deadline=20, pause=0.2)
    # A hears C directly (it is subscribed to C too) ...
    wait_for(lambda: a.available("GET /c", upstream="C"), "A sees C:/c again")
    wait_for(lambda: a.available("GET /fan"), "A GET /fan clear")
    # ... and what only B could have cleared ends by expiry (the root's open-until).
    wait_for(lambda: a.available("GET /a"), "A GET /a expires", deadline=20)
    b.spawn()
    b.wait_ready()
    wait_for(lambda: b.cascade()["subscribers"] == 1, "A re-subscribed to B (backoff)")
    wait_for(lambda: shop.call("/a") == 200, "the chain works again", deadline=20, pause=0.2)


async def _watch_until_recovered(address: str, endpoint: str, trip: Any) -> list[Any]:
    """Subscribe to a sidecar's Watch, run `trip` (blocking) meanwhile, and collect updates
    of `endpoint` until one says available again."""
    import grpc

    from cascadebreaker.sidecar.grpc.client import watch_updates

    seen: list[Any] = []
    async with grpc.aio.insecure_channel(address) as channel:
        stream = watch_updates(channel, "observer", (endpoint,), 0)
        tripping = asyncio.create_task(asyncio.to_thread(trip))
        async for update in stream:
            seen.append(update)
            if update.available and len(seen) > 1:
                break
        await tripping
    return seen


def test_a_root_that_recovers_on_its_own_says_available(shop: Shop) -> None:
    """Watch sends available=true (reason open_wait_over) when C's breaker for D ends its open
    wait by itself, with no call to move it to HALF_OPEN; before, callers had to track
    expiresAt on their own."""
    c = shop.sidecars["C"]
    seen = asyncio.run(
        asyncio.wait_for(
            _watch_until_recovered(c.grpc_address, "GET /c", lambda: _trip_c(shop)), 60
        )
    )
    down, up = seen[-2], seen[-1]
    assert (down.available, down.reason) == (False, "circuit_open")
    assert [str(x.endpoint) for x in down.cause_chain] == ["D * *", "C GET /c"]
    assert (up.available, up.reason, up.cause_chain) == (True, "open_wait_over", ())
    assert up.version > down.version
    _recover(shop)

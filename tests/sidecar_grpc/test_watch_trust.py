"""What a peer can and cannot do to a sidecar over Watch and response headers: real gRPC
streams and HTTP listeners, one process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from cascadebreaker.cascade import AvailabilityUpdate, Cause, Endpoint, HopTrust, sign
from cascadebreaker.sidecar.grpc.api import start_grpc_server
from cascadebreaker.sidecar.mesh import node as mesh_node
from cascadebreaker.sidecar.mesh import watch as propagation
from cascadebreaker.sidecar.mesh.node import CascadeNode
from cascadebreaker.sidecar.mesh.plugin import cascade_node
from cascadebreaker.sidecar.proxy.ports import WatchSubscription
from cascadebreaker.sidecar.schema import parse_config
from cascadebreaker.sidecar.server import SidecarServer, build_runtime

from .conftest import free_port

SECRET = "watch-trust-secret"


def _down(service: str, method: str, path: str, version: int) -> AvailabilityUpdate:
    """A signed unavailability of `service method path`, caused by a breaker upstream of it."""
    endpoint = Endpoint(service, method, path)
    chain = (Cause(Endpoint.service_wide("ledger"), "circuit open"), Cause(endpoint, "requires"))
    update = AvailabilityUpdate(service, endpoint, False, chain, time.time() + 30, version)
    return sign(update, SECRET.encode())


async def _victim(app_url: str, cascade: dict[str, Any]) -> SidecarServer:
    """`checkout`'s sidecar in this loop: outbound to `payment` (= the app), inbound to the app."""
    config = parse_config(
        {
            "service": "checkout",
            "app": app_url,
            "listen": {
                "outbound": "127.0.0.1:0",
                "inbound": "127.0.0.1:0",
                "grpc": None,
                "admin": None,
            },
            "upstreams": {"payment": {"url": app_url, "timeout": 5}},
            "cascade": {"secret": SECRET, **cascade},
        }
    )
    server = SidecarServer(config)
    await server.start()
    return server


def _node(server: SidecarServer) -> CascadeNode:
    assert server.runtime is not None and cascade_node(server.runtime) is not None
    return cascade_node(server.runtime)


async def _until(predicate: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_peer_cannot_poison_availability_over_watch(upstream_server: str) -> None:
    now_us = time.time_ns() // 1000
    good = _down("payment", "GET", "/v1/refunds", now_us)
    script = [
        _down("checkout", "GET", "/orders", now_us - 10),  # about the receiver itself
        _down("payment", "GET", "/v1/charges", 2**64 - 1),  # would make real updates stale
        _down("ledger", "GET", "/v1/entries", now_us - 5),  # not the service it was asked for
        good,
    ]
    subscriptions: list[WatchSubscription] = []

    async def forger(subscription: WatchSubscription) -> AsyncIterator[AvailabilityUpdate]:
        subscriptions.append(subscription)
        if len(subscriptions) == 1:
            for update in script:
                yield update
            return  # end the stream: the subscriber reconnects from its since_version
        await asyncio.Event().wait()

    forger_config = parse_config(
        {"service": "payment", "listen": {"inbound": None}, "cascade": {"enabled": False}}
    )
    forger_runtime = build_runtime(forger_config)
    grpc_port = free_port()
    forger_server = await start_grpc_server(
        parse_config(
            {"service": "payment", "listen": {"inbound": None, "grpc": f"127.0.0.1:{grpc_port}"}}
        ),
        forger_runtime,
        update_source=forger,
    )
    assert forger_server is not None
    victim = await _victim(upstream_server, {"peers": {"payment": f"127.0.0.1:{grpc_port}"}})
    node = _node(victim)
    try:
        await _until(lambda: len(subscriptions) >= 2, "a reconnect")
        assert subscriptions[1].since_version == good.version  # not 2^64-1
        assert node.rejected() == {"own_service": 1, "future_version": 1, "wrong_peer": 1}
        async with httpx.AsyncClient(timeout=10) as client:
            inbound = f"http://{victim.address('inbound')}"
            outbound = f"http://{victim.address('outbound')}/payment"
            assert (await client.get(inbound + "/orders")).status_code == 200
            assert (await client.get(outbound + "/v1/charges")).status_code == 200
            refused = await client.get(outbound + "/v1/refunds")  # the honest update counts
            assert refused.status_code == 503
            assert refused.headers["ccb-cause"] == "ledger * *, payment GET /v1/refunds"
    finally:
        await victim.stop()
        await forger_server.stop(None)
        forger_runtime.close()


class _ClaimingHandler(BaseHTTPRequestHandler):
    """A plain upstream (no sidecar) that names a gRPC address in its responses."""

    protocol_version = "HTTP/1.1"
    claims: list[str] = []

    def do_GET(self) -> None:
        claim = self.claims[int(self.path.rsplit("/", 1)[1])]
        self.send_response(200)
        self.send_header("ccb-sidecar-grpc", claim)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def claiming_upstream() -> Iterator[tuple[str, list[str]]]:
    """(URL, claims): GET /<n> answers with `ccb-sidecar-grpc: claims[n]`."""
    claims: list[str] = []
    handler = type("Handler", (_ClaimingHandler,), {"claims": claims})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", claims
    server.shutdown()
    server.server_close()


async def test_a_plain_upstream_cannot_make_the_sidecar_subscribe(
    claiming_upstream: tuple[str, list[str]],
) -> None:
    url, claims = claiming_upstream
    address = f"127.0.0.1:{free_port()}"
    now = time.time()
    claims += [
        address,  # a bare address, as before tokens
        f"{address} v1.payment.{int(now)}.-",  # unsigned
        f"{address} " + HopTrust(b"another secret").issue("payment", now, f"grpc|{address}|x"),
        f"{address} " + HopTrust(SECRET.encode()).issue("payment", now, f"grpc|{address}|x"),
    ]
    victim = await _victim(url, {})
    node = _node(victim)
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            for n in range(len(claims)):
                response = await client.get(f"http://{victim.address('outbound')}/payment/{n}")
                assert response.status_code == 200
                assert "ccb-sidecar-grpc" not in response.headers  # never for the app
        assert node.peers.peers == [], (address, node.status())
        assert node.status()["untrusted_peer_claims"] == len(claims)
    finally:
        await victim.stop()


async def test_subscriptions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mesh_node, "MAX_PEERS_PER_UPSTREAM", 2)
    monkeypatch.setattr(propagation, "MAX_SUBSCRIBERS", 1)
    victim = await _victim("http://127.0.0.1:9", {})
    node = _node(victim)
    try:
        for port in (1001, 1002, 1003):
            node.peer_seen("payment", f"127.0.0.1:{port}")
        assert len(node.peer_of["payment"]) == 2
        assert len(node.peers.peers) == 2
        first = node.hub.source(WatchSubscription("a", (), 0, "ipv4:127.0.0.1:5000"))
        second = node.hub.source(WatchSubscription("b", (), 0, "ipv4:127.0.0.1:5001"))
        reader = asyncio.ensure_future(anext(first))
        await _until(lambda: node.hub.subscribers == 1, "the first stream")
        assert [u async for u in second] == []  # refused at once: the stream ends
        reader.cancel()
    finally:
        await victim.stop()

"""The sidecar run in-process on free ports: request hooks, the call API, the upstream client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from cascadebreaker.sidecar.proxy.errors import CallRejected, UnknownUpstream
from cascadebreaker.sidecar.proxy.hooks import (
    Direction,
    Rejection,
    RequestInfo,
    default_route_resolver,
)
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime
from cascadebreaker.sidecar.schema import parse_config
from cascadebreaker.sidecar.server import SidecarServer
from cascadebreaker.sidecar.upstream import (
    UpstreamClient,
    UpstreamConnectError,
    UpstreamTarget,
    UpstreamTimeout,
)

from .conftest import Upstream, free_port


class RecordingHook:
    """Rejects one route, adds a header to everything else, records what it saw."""

    def __init__(self, reject_route: str) -> None:
        self.reject_route = reject_route
        self.requests: list[RequestInfo] = []
        self.responses: list[tuple[str, int, str]] = []

    def on_request(self, info: RequestInfo) -> Rejection | None:
        self.requests.append(info)
        if info.route == self.reject_route:
            return Rejection(
                {"error": "endpoint unavailable", "endpoint": info.endpoint}, retry_after=2.5
            )
        info.add_headers.append((b"x-serving-endpoint", info.endpoint.encode()))
        return None

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        self.responses.append((info.endpoint, status, outcome))


class ExplodingHook:
    """A broken hook must not break the proxy."""

    def on_request(self, info: RequestInfo) -> Rejection | None:
        raise RuntimeError("boom")

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        raise RuntimeError("boom")


@pytest.fixture
async def server(upstream: Upstream) -> AsyncIterator[SidecarServer]:
    """A sidecar in this event loop, every listener on port 0."""
    config = parse_config(
        {
            "service": "checkout",
            "app": upstream.url,
            "listen": {
                "outbound": "127.0.0.1:0",
                "inbound": "127.0.0.1:0",
                "grpc": None,
                "admin": "127.0.0.1:0",
            },
            "upstreams": {
                "payment": {
                    "url": upstream.url,
                    "timeout": 2,
                    "breaker": {"failure_threshold": 2, "recovery_timeout": 30},
                },
                "ledger": {"url": f"http://127.0.0.1:{free_port()}", "timeout": 1},
            },
        }
    )
    sidecar = SidecarServer(config)
    await sidecar.start()
    yield sidecar
    await sidecar.stop()


def runtime_of(server: SidecarServer) -> SidecarRuntime:
    assert server.runtime is not None
    return server.runtime


async def test_hook_rejects_an_endpoint_and_adds_headers(
    server: SidecarServer, upstream: Upstream
) -> None:
    hook = RecordingHook(reject_route="/v1/charges/{id}")
    runtime_of(server).hooks.add(hook)
    outbound = "http://" + server.address("outbound")
    async with httpx.AsyncClient(timeout=10) as client:
        rejected = await client.post(outbound + "/payment/v1/charges/42", content=b"{}")
        allowed = await client.get(
            outbound + "/payment/v1/refunds/9f1c2a3b4d5e6f708192a3b4c5d6e7f8"
        )
    assert rejected.status_code == 503
    assert rejected.headers["retry-after"] == "3"
    assert rejected.json() == {"error": "endpoint unavailable", "endpoint": "POST /v1/charges/{id}"}
    assert allowed.status_code == 200
    seen = dict(upstream.state.requests[-1]["headers"])
    assert seen["x-serving-endpoint"] == "GET /v1/refunds/{id}"
    assert [info.direction for info in hook.requests] == [Direction.OUTBOUND] * 2
    assert hook.responses == [
        ("POST /v1/charges/{id}", 503, "rejected"),
        ("GET /v1/refunds/{id}", 200, "success"),
    ]


async def test_hook_sees_inbound_requests(server: SidecarServer) -> None:
    hook = RecordingHook(reject_route="/never")
    runtime_of(server).hooks.add(hook)
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get("http://" + server.address("inbound") + "/orders/17")
    assert response.status_code == 200
    info = hook.requests[0]
    assert (info.direction, info.service, info.target) == (
        Direction.INBOUND,
        "checkout",
        "checkout",
    )
    assert info.endpoint == "GET /orders/{id}"
    assert info.header("User-Agent") is not None


async def test_inbound_strips_every_cascade_header(server: SidecarServer) -> None:
    """`ccb-*` headers are for sidecars: the app never sees them, and cannot answer with a
    sidecar address of its own."""
    inbound = "http://" + server.address("inbound")
    headers = {
        "ccb-foo": "1",
        "CCB-Cause": "payment * *",
        "ccb-serving-endpoint": "checkout GET /evil",
        "ccb-optional": "1",
        "ccb-hop": "v1.gateway.1.-",
        "ccb-sidecar-grpc": "127.0.0.1:1",
        "x-kept": "yes",
    }
    async with httpx.AsyncClient(timeout=10) as client:
        seen = await client.get(inbound + "/headers", headers=headers)
        answered = await client.get(
            inbound + "/respond-with", params={"ccb-sidecar-grpc": "10.0.0.9:15002", "x-a": "1"}
        )
    names = [name for name, _ in seen.json()["headers"]]
    assert not [name for name in names if name.startswith("ccb-")]
    assert "x-kept" in names
    assert "ccb-sidecar-grpc" not in answered.headers
    assert answered.headers["x-a"] == "1"


async def test_broken_hook_lets_requests_through(server: SidecarServer) -> None:
    runtime_of(server).hooks.add(ExplodingHook())
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get("http://" + server.address("outbound") + "/payment/ok")
    assert response.status_code == 200


async def test_call_api_applies_breaker_and_classifies(server: SidecarServer) -> None:
    runtime = runtime_of(server)
    ok = await runtime.call("payment", "POST", "/echo", {"content-type": "text/plain"}, b"hi")
    assert (ok.status, ok.body) == (200, b"hi")
    assert ("content-type", "text/plain") in ok.headers
    for _ in range(2):
        failed = await runtime.call("payment", "GET", "/status/500")
        assert failed.status == 500
    with pytest.raises(CallRejected) as rejected:
        await runtime.call("payment", "GET", "/ok")
    assert rejected.value.rejection.body["circuitState"] == "OPEN"
    assert runtime.check("payment")["callable"] is False
    with pytest.raises(UnknownUpstream):
        await runtime.call("shipping", "GET", "/")
    with pytest.raises(UpstreamConnectError):
        await runtime.call("ledger", "GET", "/")
    assert runtime.status()["breakers"]["ledger"]["calls"]["connect"] == 1


async def test_extra_admin_route(server: SidecarServer) -> None:
    runtime_of(server).admin_routes["/availability"] = lambda query: (200, {"query": query})
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get("http://" + server.address("admin") + "/availability?e=x")
    assert response.json() == {"query": "e=x"}


async def test_upstream_client_reuses_connections(upstream: Upstream) -> None:
    client = UpstreamClient(
        [
            UpstreamTarget.from_url("payment", upstream.url + "/base"),
            UpstreamTarget.from_url("plain", upstream.url),
        ]
    )
    try:
        for i in range(3):
            response = await client.request(
                "payment", "GET", f"/n/{i}", [("connection", "close"), ("x-a", "1")]
            )
            assert response.body == f"ok /base/n/{i}".encode()
        assert client.pool("payment").open_count == 1
        head = await client.request("payment", "HEAD", "/h")
        assert head.body == b""
        streamed = await client.request("plain", "GET", "/big?size=100000")
        assert len(streamed.body) == 100000
    finally:
        client.close()


async def test_upstream_client_timeout_and_refused(upstream: Upstream) -> None:
    client = UpstreamClient(
        [
            UpstreamTarget.from_url("slow", upstream.url, timeout=0.2),
            UpstreamTarget.from_url("dead", f"http://127.0.0.1:{free_port()}"),
        ]
    )
    try:
        with pytest.raises(UpstreamTimeout) as timed_out:
            await client.request("slow", "GET", "/hang")
        assert timed_out.value.status == 504
        with pytest.raises(UpstreamConnectError) as refused:
            await client.request("dead", "GET", "/")
        assert refused.value.status == 502
    finally:
        upstream.state.release.set()
        client.close()


def test_request_info_route_is_lazy() -> None:
    calls: list[Any] = []

    def resolver(service: str, method: str, path: str) -> str:
        calls.append((service, method, path))
        return "/t"

    info = RequestInfo(Direction.OUTBOUND, "a", "b", b"GET", b"/x/1", [], "", resolver)
    assert calls == []
    assert info.endpoint == "GET /t"
    assert info.route == "/t"
    assert calls == [("b", "GET", "/x/1")]


def test_request_info_decodes_method_and_path_once_on_first_use() -> None:
    info = RequestInfo(
        Direction.OUTBOUND, "a", "b", b"GET", b"/caf\xe9?q=1", [], "", default_route_resolver
    )
    assert (info.raw_method, info.raw_path) == (b"GET", b"/caf\xe9?q=1")
    assert info.path == "/caf\u00e9?q=1"  # latin-1, as on the wire: every byte is kept
    assert info.path is info.path and info.method is info.method
    assert info.method == "GET"


@pytest.mark.parametrize(
    ("target", "status", "forwarded"),
    [
        (b"/orders/17?x=1", 200, "/orders/17?x=1"),
        (b"http://checkout:8080/orders/18", 200, "/orders/18"),
        (b"HTTP://checkout", 200, "/"),
        (b"orders/19", 400, None),
        (b"", 400, None),
    ],
)
async def test_inbound_request_target_forms(
    server: SidecarServer, upstream: Upstream, target: bytes, status: int, forwarded: str | None
) -> None:
    """Origin form passes as it is, absolute form becomes its path, anything else is a 400."""
    host, port = server.address("inbound").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET " + target + b" HTTP/1.1\r\nhost: checkout\r\nconnection: close\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
    writer.close()
    assert head.split()[1] == str(status).encode()
    if forwarded is not None:
        assert upstream.state.requests[-1]["path"] == forwarded
